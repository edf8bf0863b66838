"""The one config path of the conv, pool, loss, embedding and rnn_cell families: a launch names
its shape with the names its tuning/<family>.json buckets use (a wrong name would silently give
the catch-all bucket "*", not the one the tuner tuned), and explicit parameters are checked."""
import numpy as np
import pytest

from tvk_kernels import InvalidConfigError
from tvk_kernels.kernels import conv, embedding, loss, pool, rnn_cell
from tvk_kernels.kernels.launch import Family
from tvk_kernels.search_space import search_space


@pytest.fixture
def looked_up(monkeypatch):
    """(family, shape, bucket) of every bucket a launch looks up."""
    seen = []
    bucket = Family.bucket

    def spy(self, shape):
        name = bucket(self, shape)
        seen.append((self.family, dict(shape), name))
        return name

    monkeypatch.setattr(Family, "bucket", spy)
    return seen


def _zeros(device, *shape, dtype=np.float32):
    return device.upload(np.zeros(shape, dtype))


def test_launches_look_up_their_json_buckets(device, looked_up):
    xs, ws = (1, 2, 6, 6), (3, 2, 3, 3)
    x, w, y = _zeros(device, *xs), _zeros(device, *ws), _zeros(device, 1, 3, 4, 4)
    conv.conv2d_forward(device, x, w, None, y, xs, ws)
    conv.conv2d_backward_input(device, y, w, x, xs, ws)
    conv.conv2d_backward_weight(device, y, x, w, xs, ws)
    pool.avg_pool2d(device, x, y, xs, 2)
    pool.avg_pool2d_backward(device, y, x, xs, 2)
    logits, target = _zeros(device, 4, 5), _zeros(device, 4, dtype=np.int64)
    loss.cross_entropy_forward(device, logits, target, _zeros(device, 1), 4, 5)
    embedding.embedding_forward(device, logits, target, _zeros(device, 4, 5), 4, 4, 5)
    embedding.embedding_backward(device, logits, target, _zeros(device, 4, 5), 4, 4, 5)
    gates, hx, hy = _zeros(device, 2, 9), _zeros(device, 2, 3), _zeros(device, 2, 3)
    rnn_cell.gru_forward(device, gates, gates, hx, None, None, hy, _zeros(device, 2, 15), 2, 3)
    device.synchronize()
    assert {family for family, _, _ in looked_up} == {"conv2d", "pool", "loss", "embedding", "rnn_cell"}
    for family, shape, bucket in looked_up:
        assert bucket in search_space(family)["buckets"], (family, shape, bucket)


@pytest.mark.parametrize("run", [
    # a workgroup of 0 invocations
    lambda d, b: rnn_cell.lstm_forward(d, b, b, b, None, None, b, b, b, 1, 1, params={"WG": 0}),
    # over the search space's TPR <= CE_WG (was clamped to CE_WG without a word)
    lambda d, b: loss.cross_entropy_forward(d, b, b, b, 1, 4, params={"CE_WG": 32, "TPR": 64}),
])
def test_explicit_params_are_checked(device, run):
    buf = device.allocator.alloc(256)
    with pytest.raises(InvalidConfigError, match=r"(rnn_cell|loss)\b.*(WG=0|TPR)"):
        run(device, buf)
    device.synchronize()  # the runtime stays usable
