"""`make gpu-check`: every CUDA path of the runner run and timed by one command, one JSON.

On a machine with a GPU (aimed at under 5 minutes on one GPU):
  1. the device tests (tests/test_devices.py) with the GPU visible: sync-free Cholesky without a
     host sync, training and evaluation in fp32 and bf16, resume bit-identical, the compiled
     step in CUDA graphs against the eager one;
  2. the bench step of every model x inference in fp32, bf16 and compiled (CUDA graphs);
  3. one short epoch of dlgm1 with each inference and of DRAW with each, through vgp-train;
  4. vgp-eval of one of those checkpoints;
  5. a one-rank torchrun with NCCL (trainer.ddp_backend=nccl: the whole DDP path).
Each part runs in its own process with a time limit; the JSON (--out) holds every number, what
failed and what was skipped, and the exit status is 1 when anything failed.

Without a GPU, or with --cpu-smoke, it runs what a CPU can (the device tests on the CPU, a tiny
bench, tiny epochs, evaluation, a one-rank torchrun with gloo) and says plainly what it skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent.parent  # the checkout: its tests/ and scripts/
MODELS = ("dlgm1", "dlgm2", "draw")
INFERENCES = ("vae", "vgp")
PARTS = ("tests", "bench", "epochs", "eval", "torchrun")
EPOCH_MODELS = ("dlgm1", "draw")

# tiny runs for the CPU smoke mode: plumbing, in seconds
TINY_RUN = [
    "dataset=synthetic",
    "dataset.n_train=60",
    "dataset.n_valid=20",
    "dataset.n_test=20",
    "trainer.batch_size=20",
    "inference.variational_data_size=8",
    "eval.is_samples=4",
    "eval.chunk_size=2",
    "eval.batch_size=10",
]
TINY_MODEL = {
    "dlgm1": ["model.latent_dims=[3]", "model.hidden_dims=[[16]]"],
    "draw": ["model.steps=2", "model.encoder_size=16", "model.decoder_size=16", "model.z_dim=3"],
}


def data_overrides(smoke: bool) -> list[str]:
    """The dataset a part trains on: MNIST when converted, else synthetic (tiny when smoke)."""
    if not smoke and (REPO / "data" / "mnist.h5").exists():
        return ["dataset=mnist", f"data_dir={REPO / 'data'}"]
    if smoke:
        return [o for o in TINY_RUN if o.startswith("dataset")]
    return ["dataset=synthetic", "dataset.n_train=5000", "dataset.n_test=1000"]


def run_part(
    name: str,
    command: list[str],
    timeout: int,
    env: dict[str, str] | None = None,
    cwd: Path = REPO,
) -> dict[str, Any]:
    """Run one part in its own process: status, seconds and the tail of its output."""
    print(f"gpu-check: {name} ...", flush=True)
    environment = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    started = time.perf_counter()
    try:
        finished = subprocess.run(
            command,
            cwd=cwd,
            env=environment,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        status = "passed" if finished.returncode == 0 else "failed"
        output = finished.stdout + finished.stderr
        returncode: int | None = finished.returncode
    except subprocess.TimeoutExpired as error:
        status, returncode = "failed", None
        output = f"timed out after {timeout} s\n" + _text(error.stdout) + _text(error.stderr)
    seconds = round(time.perf_counter() - started, 1)
    print(f"gpu-check: {name}: {status} in {seconds} s", flush=True)
    result = {"status": status, "seconds": seconds, "returncode": returncode}
    if status != "passed":
        result["output_tail"] = output[-4000:]
    result["_output"] = output
    return result


def _text(value: Any) -> str:
    """A timed-out process's output as text."""
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def device_tests(cuda: bool, timeout: int) -> dict[str, Any]:
    """tests/test_devices.py with the GPU visible (or on the CPU): status and counts."""
    visible = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0") if cuda else ""
    result = run_part(
        "device tests",
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_devices.py"],
        timeout,
        env={"CUDA_VISIBLE_DEVICES": visible},
    )
    summary = re.findall(r"(\d+) (passed|failed|skipped|error)", result.pop("_output"))
    result["counts"] = {kind: int(count) for count, kind in summary}
    return result


def bench(cuda: bool, smoke: bool, out_dir: Path, timeout: int) -> dict[str, Any]:
    """scripts/bench.py's steps in fp32, bf16 (and compiled on CUDA): the numbers it wrote."""
    path = out_dir / "bench.json"
    command = [sys.executable, "scripts/bench.py", "--out", str(path), "--only", "steps"]
    if cuda:
        command += ["--device", "cuda", "--variants", "fp32", "bf16", "compile", "--quick"]
    else:  # compiling on a CPU takes minutes per configuration: fp32 and bf16 only
        command += ["--device", "cpu", "--variants", "fp32", "bf16", "--quick", "--no-floors"]
    if smoke:
        command += ["--tiny", "--threads", "1"]
    result = run_part("bench", command, timeout)
    result.pop("_output")
    if path.exists():
        bench_json = json.loads(path.read_text())
        result["machine"] = bench_json.get("machine")
        result["steps"] = {
            name: {
                key: entry.get(key)
                for key in (
                    "step_ms",
                    "floor_ms",
                    "step_over_floor",
                    "achieved_gflops",
                    "graphed_steps",
                    "compile_fallback",
                )
                if key in entry
            }
            for name, entry in bench_json.get("steps", {}).items()
        }
        fallbacks = [n for n, e in result["steps"].items() if e.get("compile_fallback")]
        if fallbacks:
            result["status"] = "failed"
            result["reason"] = f"torch.compile fell back to eager for: {fallbacks}"
    return result


def train_command(overrides: list[str]) -> list[str]:
    """vgp-train with `overrides`, as a command."""
    return [sys.executable, "-m", "vgp_bench.run.commands.train", *overrides]


def short_epochs(
    device: str, smoke: bool, out_dir: Path, timeout: int, models: list[str]
) -> tuple[dict[str, Any], Path | None]:
    """One short epoch of dlgm1 and of DRAW with each inference, through vgp-train."""
    results: dict[str, Any] = {}
    checkpoint = None
    for model in models:
        for inference in INFERENCES:
            name = f"{model} {inference}"
            run_dir = out_dir / "runs" / f"{model}_{inference}"
            overrides = [
                f"model={model}",
                f"inference={inference}",
                f"device={device}",
                "trainer.epochs=1",
                "trainer.progress=false",
                f"hydra.run.dir={run_dir}",
            ]
            if smoke:
                overrides += [*TINY_RUN, *TINY_MODEL[model]]
                if inference == "vae":
                    overrides.remove("inference.variational_data_size=8")
            else:
                subset = 5000 if model == "dlgm1" else 1000
                overrides += [
                    *data_overrides(smoke),
                    f"dataset.subset={subset}",
                    "eval.is_samples=100",
                    "eval.subset=500",
                ]
            result = run_part(f"epoch {name}", train_command(overrides), timeout)
            result.pop("_output")
            metrics_path = run_dir / "metrics.json"
            if metrics_path.exists():
                metrics = json.loads(metrics_path.read_text())
                result["steps"] = metrics.get("steps")
                result["train_seconds"] = metrics.get("wall_time_s")
                if metrics.get("steps") and metrics.get("wall_time_s"):
                    result["ms_per_step"] = round(
                        1000 * metrics["wall_time_s"] / metrics["steps"], 2
                    )
                result["test_nll"] = metrics.get("test", {}).get("nll")
                result["run_status"] = metrics.get("status")
                if metrics.get("status") != "finished":
                    result["status"] = "failed"
            if model == "dlgm1" and inference == "vgp" and result["status"] == "passed":
                checkpoint = run_dir / "checkpoints" / "last.pt"
            results[name] = result
    return results, checkpoint


def evaluation(
    checkpoint: Path | None, device: str, smoke: bool, timeout: int, out_dir: Path
) -> dict[str, Any]:
    """vgp-eval of the dlgm1 VGP epoch's checkpoint: status, -log p(x) and samples a second."""
    if checkpoint is None or not checkpoint.exists():
        return {"status": "failed", "reason": "no checkpoint: the dlgm1 vgp epoch failed"}
    samples, subset = (6, 10) if smoke else (1000, 1000)
    command = [
        sys.executable,
        "-m",
        "vgp_bench.run.commands.eval_command",
        f"checkpoint={checkpoint}",
        f"eval.is_samples={samples}",
        f"eval.subset={subset}",
        f"device={device}",
    ]
    if not smoke:
        command.append(f"data_dir={REPO / 'data'}")
    # vgp-eval logs to evaluate.log where it starts: start it in the scratch folder
    result = run_part("evaluation", command, timeout, cwd=out_dir)
    output = result.pop("_output")
    match = re.search(r"^test\s+([-\d.e+]+|nan|inf) ±", output, re.MULTILINE)  # its table
    result["nll"] = float(match.group(1)) if match else None
    if result["status"] == "passed":
        result["samples_per_s"] = round(samples * subset / max(result["seconds"], 1e-9))
        result["note"] = "samples/s includes process start and data loading"
    return result


def torchrun(backend: str, device: str, out_dir: Path, timeout: int) -> dict[str, Any]:
    """A one-rank torchrun that joins a process group (trainer.ddp_backend): the DDP path."""
    run_dir = out_dir / "runs" / f"torchrun_{backend}"
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=1",
        "-m",
        "vgp_bench.run.commands.train",
        *TINY_RUN,
        *TINY_MODEL["dlgm1"],
        "inference=vgp",
        f"device={device}",
        f"trainer.ddp_backend={backend}",
        "trainer.max_steps=4",
        "trainer.progress=false",
        f"hydra.run.dir={run_dir}",
    ]
    result = run_part(f"torchrun {backend}", command, timeout)
    result.pop("_output")
    metrics_path = run_dir / "metrics.json"
    if metrics_path.exists():
        metrics = json.loads(metrics_path.read_text())
        result["run_status"] = metrics.get("status")
        result["steps"] = metrics.get("steps")
        if metrics.get("status") != "finished":
            result["status"] = "failed"
    elif result["status"] == "passed":
        result["status"] = "failed"
        result["reason"] = "no metrics.json written"
    return result


def environment(cuda: bool) -> dict[str, Any]:
    """The machine, Python, torch and CUDA versions, and the GPU when there is one."""
    info: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
    }
    if cuda:
        properties = torch.cuda.get_device_properties(0)
        info |= {
            "gpu": properties.name,
            "gpu_memory_gib": round(properties.total_memory / 2**30, 1),
            "capability": f"{properties.major}.{properties.minor}",
            "gpu_count": torch.cuda.device_count(),
            "nccl": torch.distributed.is_nccl_available(),
        }
    return info


def main(argv: list[str] | None = None) -> int:
    """Run every part asked for, write the JSON, and exit 1 when anything failed."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="gpu_check/results.json")
    parser.add_argument(
        "--cpu-smoke",
        action="store_true",
        help="tiny sizes on the CPU even when a GPU is present (what a CPU machine runs)",
    )
    parser.add_argument("--skip", nargs="*", default=[], choices=PARTS, help="parts to leave out")
    parser.add_argument(
        "--epoch-models", nargs="*", default=list(EPOCH_MODELS), choices=EPOCH_MODELS
    )
    args = parser.parse_args(argv)
    cuda = torch.cuda.is_available() and not args.cpu_smoke
    smoke = not cuda
    device = "cuda" if cuda else "cpu"
    out = Path(args.out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu_check_", dir=out.parent))
    started = time.perf_counter()
    results: dict[str, Any] = {
        "mode": "cuda" if cuda else "cpu-smoke",
        "environment": environment(cuda),
        "parts": {},
        "skipped": [],
    }
    if not cuda:
        why = (
            "--cpu-smoke was given"
            if torch.cuda.is_available()
            else "no CUDA device is visible on this machine"
        )
        results["skipped"] = [
            f"{what}: {why}"
            for what in (
                "the device tests on CUDA (they ran on the CPU only)",
                "the bench on CUDA (it ran on the CPU at tiny sizes, fp32 and bf16)",
                "torch.compile and CUDA graphs (reduce-overhead)",
                "full-size short epochs on the GPU (tiny epochs ran on the CPU)",
                "NCCL (the one-rank torchrun used gloo)",
            )
        ]
    limits = {"tests": 240, "bench": 300, "epoch": 240, "eval": 120, "torchrun": 180}
    parts = results["parts"]

    def save() -> None:
        results["seconds"] = round(time.perf_counter() - started, 1)
        out.write_text(json.dumps(results, indent=2, default=str))

    if "tests" not in args.skip:
        parts["device_tests"] = device_tests(cuda, limits["tests"])
        save()
    if "bench" not in args.skip:
        parts["bench"] = bench(cuda, smoke, work, limits["bench"])
        save()
    checkpoint = None
    if "epochs" not in args.skip:
        parts["short_epochs"], checkpoint = short_epochs(
            device, smoke, work, limits["epoch"], args.epoch_models
        )
        save()
    if "eval" not in args.skip:
        parts["evaluation"] = evaluation(checkpoint, device, smoke, limits["eval"], work)
        save()
    if "torchrun" not in args.skip:
        backend = "nccl" if cuda else "gloo"
        parts[f"torchrun_{backend}"] = torchrun(backend, device, work, limits["torchrun"])
        save()
    results["skipped"] += [f"{name}: --skip" for name in args.skip]
    results["skipped"] += [
        f"short epochs of {model}: --epoch-models"
        for model in EPOCH_MODELS
        if model not in args.epoch_models and "epochs" not in args.skip
    ]
    failures = []
    for name, part in parts.items():
        if "status" in part:
            if part["status"] != "passed":
                failures.append(name)
        else:  # a group of runs
            failures += [f"{name}: {k}" for k, v in part.items() if v["status"] != "passed"]
    results["failures"] = failures
    results["passed"] = not failures
    save()
    print(f"gpu-check: mode {results['mode']}, {results['seconds']} s, wrote {out}")
    for line in results["skipped"]:
        print(f"gpu-check: SKIPPED {line}")
    for name in failures:
        print(f"gpu-check: FAILED {name}")
    print("gpu-check: " + ("all parts passed" if not failures else f"{len(failures)} failed"))
    return 0 if not failures else 1
