"""Test-wide settings: one CPU thread (deterministic, no oversubscription), no GPU."""

import os

import torch

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
torch.set_num_threads(1)
