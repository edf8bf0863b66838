"""Optimizers that call TorchVK's fused kernels (filled in below)."""
