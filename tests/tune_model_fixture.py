"""A tiny model for tests/test_tune_model.py's `tvk-tune --model tune_model_fixture:build`."""
import torch


def build():
    """(2, 3, 8, 8) -> conv 3->4, 3x3 -> (2, 4, 6, 6) -> flatten 144 -> linear -> 5 classes."""
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(144, 5))


not_a_factory = 42
