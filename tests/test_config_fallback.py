"""A tuned config file that is wrong never breaks an op: the entry is skipped with one warning
naming the file, family and bucket, and the next level (arch, vendor, shipped, default) runs.

Results are checked against numpy/torch CPU in float64 (matmul: |err| <= 1e-5 * |A|@|B| + 1e-6;
softmax and sum: 1e-5 relative to the largest reference value).
"""
import json
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tvk_kernels import config
from tvk_kernels.kernels import matmul as matmul_kernels
from tvk_kernels.kernels.launch import family
from tvk_kernels.kernels.reduce import Reduce, reduce
from tvk_kernels.kernels.softmax import Softmax, softmax


# ------------------------------------------------------------------ ops, each checked against the host
def run_matmul(device):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((16, 24), dtype=np.float32), rng.standard_normal((24, 20), dtype=np.float32)
    A, B, C = device.upload(a), device.upload(b), device.allocator.alloc(16 * 20 * 4)
    matmul_kernels.matmul(device, A.address, B.address, C.address, 16, 20, 24)
    got = device.download(C, np.float32, (16, 20)).astype(np.float64)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    assert np.all(np.abs(got - a64 @ b64) <= 1e-5 * (np.abs(a64) @ np.abs(b64)) + 1e-6)


def run_softmax(device):
    x = np.random.default_rng(1).standard_normal((6, 37), dtype=np.float32)
    X, Y = device.upload(x), device.allocator.alloc(x.nbytes)
    softmax(device, X.address, Y.address, x.shape, 1)
    want = torch.softmax(torch.from_numpy(x).double(), 1).numpy()
    np.testing.assert_allclose(device.download(Y, np.float32, x.shape), want, rtol=0, atol=1e-5 * want.max())


def run_sum(device):
    x = np.random.default_rng(2).standard_normal((5, 70), dtype=np.float32)
    X, Y = device.upload(x), device.allocator.alloc(5 * 4)
    reduce(device, "sum", X.address, Y.address, x.shape, dims=1)
    want = x.astype(np.float64).sum(1)
    np.testing.assert_allclose(device.download(Y, np.float32, (5,)), want, rtol=0, atol=1e-5 * np.abs(x).sum(1).max())


# family -> (its Family class, the op, the bucket the op's shape falls in, a valid parameter set
# that differs from the family's default)
FAMILIES = {
    "matmul": (matmul_kernels.Matmul, run_matmul, "small",
               {"BM": 32, "BN": 32, "BK": 8, "TM": 2, "TN": 2, "VEC": 4, "UNROLL": 4, "PAD": 1, "PREFETCH": 1, "FRAG": 0,
                "STAGES": 1, "SUBGROUP": 0}),
    "softmax": (Softmax, run_softmax, "small", {"WG": 32, "ITEMS": 2, "SUBGROUP": 0}),
    "reduce": (Reduce, run_sum, "small", {"WG": 32, "ITEMS": 2, "SUBGROUP": 0, "TARGET_GROUPS": 2,
                                          "SPLIT_MIN": 4096}),
}


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    """TVK_CONFIG_DIR of the test's own (the shipped configs stay the next level); configs reloaded."""
    d = tmp_path / "configs"
    d.mkdir()
    monkeypatch.setenv("TVK_CONFIG_DIR", str(d))
    config.reload()
    yield d
    config.reload()


def config_file(device, fam: str, buckets, match: str = "device") -> dict:
    cls = FAMILIES[fam][0]
    return {"schema": 1, "source": "measured", "device": {**config.device_key(device.facts), "match": match},
            "families": {fam: {"template_checksum": family(device, cls).checksum, "buckets": buckets}}}


def write(path, data):
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    config.reload()


def params_of(device, fam: str) -> tuple[dict, str]:
    cls, _, bucket, _ = FAMILIES[fam]
    return family(device, cls).params(bucket)


def run_recording(device, fam: str, times: int = 2) -> list[str]:
    """Run the family's op `times` times (checked each time); the TorchVK warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(times):
            FAMILIES[fam][1](device)
    return [str(w.message) for w in caught if "TorchVK" in str(w.message)]


def assert_one_warning(msgs: list[str], path, fam: str, bucket: str, *words):
    assert len(msgs) == 1, msgs
    assert str(path) in msgs[0] and fam in msgs[0] and repr(bucket) in msgs[0], msgs[0]
    for w in words:
        assert w in msgs[0], msgs[0]


# ------------------------------------------------------------------ each broken entry falls back
def bad_entries(fam: str, bucket: str):
    """(case id, buckets value, words the warning must hold) for one family."""
    out = [
        ("buckets-list", [{"params": {}}], "array"),
        ("bucket-entry-string", {bucket: "fast"}, "string"),
        ("params-null", {bucket: {"params": None}}, "params"),
        ("unknown-param", {bucket: {"params": {"BLOCK": 64}}}, "BLOCK"),
    ]
    if fam == "matmul":
        out += [
            ("BM-4096", {bucket: {"params": {"BM": 4096}}}, "BM=4096"),
            ("TM-not-dividing-BM", {bucket: {"params": {"BM": 32, "TM": 3}}}, "TM=3"),
            ("PAD-negative", {bucket: {"params": {"PAD": -1}}}, "PAD=-1"),
            ("SUBGROUP-7", {bucket: {"params": {"SUBGROUP": 7}}}, "SUBGROUP=7"),
            ("BM-string", {bucket: {"params": {"BM": "64"}}}, "BM='64'"),
            ("BM-float", {bucket: {"params": {"BM": 64.0}}}, "BM=64.0"),
            ("BM-bool", {bucket: {"params": {"BM": True}}}, "BM=True"),
            # each value in the space, together breaking a constraint (WG = 2*2 invocations)
            ("constraint-WG", {bucket: {"params": {"BM": 16, "BN": 16, "TM": 8, "TN": 8}}}, "WG >= 16"),
            # over the device's workgroup size (WG = 128*128)
            ("device-limit", {bucket: {"params": {"BM": 128, "BN": 128, "TM": 1, "TN": 1}}}, "max_workgroup"),
        ]
    else:
        out += [
            ("WG-4096", {bucket: {"params": {"WG": 4096}}}, "WG=4096"),
            ("WG-not-power-of-two", {bucket: {"params": {"WG": 96}}}, "WG=96"),
            ("ITEMS-negative", {bucket: {"params": {"ITEMS": -1}}}, "ITEMS=-1"),
            ("ITEMS-string", {bucket: {"params": {"ITEMS": "4"}}}, "ITEMS='4'"),
        ]
    return out


CASES = [(fam, *case) for fam in FAMILIES for case in bad_entries(fam, FAMILIES[fam][2])]


@pytest.mark.parametrize("fam, case, buckets, word", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_bad_entry_falls_back_with_one_warning(device, user_dir, fam, case, buckets, word):
    bucket = FAMILIES[fam][2]
    fallback = params_of(device, fam)  # what runs without the user's file (shipped config or default)
    path = user_dir / "mine.json"
    write(path, config_file(device, fam, buckets))
    msgs = run_recording(device, fam)
    assert_one_warning(msgs, path, fam, bucket, word)
    assert params_of(device, fam) == fallback


@pytest.mark.parametrize("fam", ["matmul", "softmax"])
def test_bad_device_entry_falls_back_to_the_arch_entry(device, user_dir, fam):
    _, _, bucket, good = FAMILIES[fam]
    bad = {"matmul": {"BM": 4096}, "softmax": {"WG": 4096}}[fam]
    write(user_dir / "arch.json", config_file(device, fam, {bucket: {"params": good}}, match="arch"))
    write(user_dir / "device.json", config_file(device, fam, {bucket: {"params": bad}}))
    msgs = run_recording(device, fam)
    assert_one_warning(msgs, user_dir / "device.json", fam, bucket)
    params, source = params_of(device, fam)
    assert source == "measured:arch.json" and params == {**params, **good}


def test_good_entry_is_used_without_warning(device, user_dir):
    """The control: a valid entry in the same place is used, so the cases above test the checks."""
    _, _, bucket, good = FAMILIES["matmul"]
    write(user_dir / "mine.json", config_file(device, "matmul", {bucket: {"params": good}}))
    assert run_recording(device, "matmul") == []
    assert params_of(device, "matmul") == (good, "measured:mine.json")


def test_wrong_schema_says_which_schema(device, user_dir):
    path = user_dir / "mine.json"
    write(path, {**config_file(device, "matmul", {}), "schema": 2})
    msgs = run_recording(device, "matmul", times=1)
    assert len(msgs) == 1 and "schema 2" in msgs[0] and str(path) in msgs[0]


def test_families_not_an_object_does_not_blame_the_schema(device, user_dir):
    path = user_dir / "mine.json"
    write(path, {**config_file(device, "matmul", {}), "families": ["matmul"]})
    msgs = run_recording(device, "matmul", times=1)
    assert len(msgs) == 1 and "families" in msgs[0] and "schema" not in msgs[0], msgs


# ------------------------------------------------------------------ fuzz: no file breaks an op
JUNK = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 40, 2 ** 40), st.sampled_from([-1, 0, 3, 7, 96, 4096]),
                 st.floats(allow_nan=False), st.text(max_size=4), st.lists(st.integers(0, 64), max_size=2),
                 st.dictionaries(st.text(max_size=3), st.integers(0, 64), max_size=2))
# where a mutation lands: a path of keys into the file (None: the family's name, "@b": its bucket,
# "@p": a parameter); most land deep, where a file that reads fine can still hold a bad entry (and
# first: hypothesis favours the first of a list)
PLACES = [("families", None, "buckets", "@b", "params", "@p")] * 6 + [
    ("families", None, "buckets", "@b", "params"), ("families", None, "buckets", "@b"), ("families", None, "buckets"),
    ("families", None, "template_checksum"), ("families", None), ("families",), ("device", "match"), ("device",),
    ("schema",), ()]


@st.composite
def broken_files(draw, device):
    fams = draw(st.lists(st.sampled_from(sorted(FAMILIES)), min_size=1, max_size=3, unique=True))
    data = {"schema": 1, "source": "measured", "device": {**config.device_key(device.facts), "match": "device"},
            "families": {f: config_file(device, f, {FAMILIES[f][2]: {"params": dict(FAMILIES[f][3])}})["families"][f]
                         for f in fams}}
    for _ in range(draw(st.integers(1, 3))):
        place = draw(st.sampled_from(PLACES))
        fam = draw(st.sampled_from(fams))
        keys = [{None: fam, "@b": FAMILIES[fam][2]}.get(k, k) for k in place]
        if keys and keys[-1] == "@p":
            keys[-1] = draw(st.sampled_from(sorted(FAMILIES[fam][3]) + ["BOGUS"]))
        if not keys:
            data = draw(JUNK)
            continue
        node = data
        for k in keys[:-1]:
            node = node.get(k) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            continue
        allowed = sorted(config.allowed_values(fam).get(keys[-1], ()))
        if draw(st.booleans()) and keys[-1] in node:
            del node[keys[-1]]
        elif allowed and draw(st.booleans()):  # a value of the space: with the others it may break a constraint
            node[keys[-1]] = draw(st.sampled_from(allowed))
        else:
            node[keys[-1]] = draw(JUNK)
    return data


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_config_files_never_break_an_op(device, user_dir, data):
    raw = data.draw(st.integers(0, 9), label="raw text") == 0  # unreadable files are rarer: test_tune has them
    text = data.draw(st.text(max_size=20) if raw else broken_files(device).map(json.dumps), label="file")
    write(user_dir / "fuzz.json", text)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _, run, _, _ in FAMILIES.values():
            run(device)
    assert all(issubclass(w.category, RuntimeWarning) for w in caught if "TorchVK" in str(w.message))
