"""What a run records about itself, computed in one place for the writers and the report."""

from __future__ import annotations

from typing import Any


def family_structure(inference: Any) -> str | None:
    """The structure of a VGP family in a few words (e.g. `dense T, zero mean, m=500`) from its
    inference config (a DictConfig or dict), which labels its rows: the warp's reach depends
    on it (DESIGN.md section 2). None for families without variational outputs."""
    outputs = inference.get("outputs")
    if outputs is None:
        return None
    if inference.get("warp") == "linear":  # the control: the GP taken out
        words = ["no GP (linear warp)", f"{inference.get('prior_mean')} mean"]
        if inference.get("mean_field_scale") == "tied":
            words.append(f"sigma={inference.get('noise_ratio')} s")
        return ", ".join(words)
    words = [f"{outputs} T"]
    if outputs in ("low_rank", "shared_basis"):
        words[0] += f" (r={inference.get('outputs_rank')})"
    words.append(f"{inference.get('prior_mean') or 'zero'} mean")
    if inference.get("mean_field_scale") == "tied":
        words.append(f"sigma={inference.get('noise_ratio')} s")
    words.append(f"m={inference.get('variational_data_size')}")
    if inference.get("objective") == "paper":
        words.append(f"r {inference.get('paper_auxiliary') or 'factorized'}")
    return ", ".join(words)
