"""Test-wide settings: one CPU thread (deterministic, no oversubscription), no GPU.

VGP_TEST_THREADS=N runs the suite on N threads instead, which changes the rounding of threaded
reductions (scripts/test_variations.sh uses it); results stay deterministic for a fixed N.
"""

import os

import torch

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
torch.set_num_threads(int(os.environ.get("VGP_TEST_THREADS", "1")))
