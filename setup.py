"""Packaging beyond setup.cfg: the top-level configs/ ship in the wheel as vgp_bench/configs.

configs/ stays at the top of the repository; setuptools maps it into the package, so an
installed vgp-bench finds its configs without a checkout (vgp_bench.locations.CONFIG_DIR).
"""

from setuptools import find_namespace_packages, find_packages, setup

CONFIG_PACKAGES = [
    "vgp_bench.configs",
    *(f"vgp_bench.configs.{group}" for group in find_namespace_packages(where="configs")),
]

setup(
    packages=[
        *find_packages(include=["vgp_bench", "vgp_bench.*"]),
        *CONFIG_PACKAGES,
        *find_namespace_packages(include=["hydra_plugins.*"]),  # the sweeper, the SLURM launcher
    ],
    package_dir={"vgp_bench.configs": "configs"},
    package_data={package: ["*.yaml"] for package in CONFIG_PACKAGES},
)
