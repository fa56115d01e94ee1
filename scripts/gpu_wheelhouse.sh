#!/usr/bin/env bash
# Build a wheelhouse for a GPU node that has no package index (common on clusters): sfx's runtime
# dependencies (setup.py's install_requires, plus the extras asked for) and, for the side-by-side benches,
# Sample Factory 2.1.1's, as binary wheels for the node's Python version and platform, downloaded here.
#
#   bash scripts/gpu_wheelhouse.sh [--python 3.12] [--platform manylinux_2_28_x86_64 ...] [--extras doom,atari]
#                                  [--out bench/results/wheelhouse] [--torch_version 2.11.0 | --with_torch] [--minimal]
#                                  [--skip NAME ...] [--sf_skip NAME ...] [--no_sf]
#
# Two folders, because the two cannot share one site: Sample Factory 2.1.1 pins numpy<2 and gymnasium<1.0,
# sfx needs gymnasium>=1.0:
#   OUT/sfx/   sfx's wheels and requirements.txt (name==version of each)
#   OUT/sf/    Sample Factory's (less the wheels already in sfx/, which its install reads from there)
#   OUT/install.sh   the commands to run on the node (printed at the end too)
#
# torch is left out (the node has its own CUDA build): pip resolves against a stand-in wheel of
# torch --torch_version without dependencies, so nothing torch alone needs (CUDA libraries, triton, sympy ...)
# is downloaded; --with_torch downloads torch and its dependencies as well (gigabytes; the index must serve
# the CUDA libraries). --skip NAME (repeatable, or comma-separated) leaves out other packages the same way,
# at the version the resolver picks: those the node already has, or that a run never imports.
# --minimal skips what the reference node (shared/reference/gpu_node: python 3.12, torch 2.11, numpy 2,
# tensorboard, pandas, matplotlib, opencv-python-headless, psutil preinstalled) has or bench.throughput
# never imports, and drops two multiplayer maps (8 MB) from Sample Factory's wheel, so that the wheelhouse
# travels with a small working tree (about 60 MB for python 3.12).
#
# Install on the node (no index): each set into its own folder, put first on PYTHONPATH
#   python3 -m pip install --no-index --no-deps --find-links OUT/sfx --target /tmp/site -r OUT/sfx/requirements.txt
#   PYTHONPATH=/tmp/site python3 -m bench.throughput --device=gpu ...
# (or into a venv made with --system-site-packages, so the node's torch stays visible).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py_version=3.12
platforms=()
extras=doom
out="$repo/bench/results/wheelhouse"
torch_version=2.11.0
with_torch=0
with_sf=1
minimal=0
skip=()
sf_skip=()

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "gpu_wheelhouse: error: $*" >&2; exit 2; }
split_into() { local -n arr=$1; local IFS=,; for x in $2; do [[ -n "$x" ]] && arr+=("$x"); done; return 0; }

while [[ $# -gt 0 ]]; do
    arg="$1"; val=""
    if [[ "$arg" == --*=* ]]; then val="${arg#*=}"; arg="${arg%%=*}"; shift
    elif [[ "$arg" =~ ^--(python|platform|extras|out|torch_version|skip|sf_skip)$ ]]; then
        [[ $# -ge 2 ]] || die "$arg needs a value"; val="$2"; shift 2
    else shift; fi
    case "$arg" in
        --python) py_version="$val" ;;
        --platform) platforms+=("$val") ;;
        --extras) extras="$val" ;;
        --out) out="$val" ;;
        --torch_version) torch_version="$val" ;;
        --with_torch) with_torch=1 ;;
        --no_sf) with_sf=0 ;;
        --minimal) minimal=1 ;;
        --skip) split_into skip "$val" ;;
        --sf_skip) split_into sf_skip "$val" ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown argument '$arg' (see --help)" ;;
    esac
done
[[ "$py_version" =~ ^3\.[0-9]+$ ]] || die "--python=$py_version: give MAJOR.MINOR, e.g. 3.12"
[[ "$torch_version" =~ ^[0-9]+(\.[0-9]+)*$ ]] || die "--torch_version=$torch_version: give a release, e.g. 2.11.0"
[[ ${#platforms[@]} -gt 0 ]] || platforms=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64
                                         manylinux1_x86_64)
if [[ $minimal == 1 ]]; then
    # the reference node has these; imageio(-ffmpeg) (videos) and submitit (Slurm) are imported only when used
    # pygame-ce: vizdoom's own gymnasium wrapper draws with it, sfx drives vizdoom.DoomGame directly
    skip+=(numpy tensorboard pandas matplotlib opencv-python-headless psutil pillow imageio imageio-ffmpeg submitit
           pygame-ce)
    # Sample Factory imports wandb, huggingface-hub and pyglet only for features the benches leave off;
    # opencv-python's cv2 comes from the node's headless build
    sf_skip+=(tensorboard psutil threadpoolctl filelock opencv-python wandb huggingface-hub pyglet pygame pygame-ce)
fi
python=python3
command -v "$python" >/dev/null || die "python3 not found"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

# ---------------------------------------------------------------- helpers in Python (no pip internals used)
cat >"$work/helper.py" <<'PY'
"""gpu_wheelhouse.sh's helpers: requirements from setup.py, stand-in wheels, pins from a pip report."""
import ast
import base64
import hashlib
import json
import re
import sys
import zipfile
from pathlib import Path


def setup_requirements(setup_py: str, extras: str) -> None:
    """install_requires + the named extras of setup.py's setup(...) call, read without running it; torch left out."""
    tree = ast.parse(Path(setup_py).read_text())
    kw = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "setup":
            kw = {k.arg: k.value for k in node.keywords}
    reqs = list(ast.literal_eval(kw["install_requires"]))
    table = ast.literal_eval(kw.get("extras_require", ast.Dict(keys=[], values=[])))
    for name in filter(None, extras.split(",")):
        if name not in table:
            sys.exit(f"gpu_wheelhouse: error: --extras names {name!r}; setup.py's extras are: {', '.join(table)}")
        reqs += table[name]
    seen = set()
    for r in reqs:
        key = re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower()
        if key != "torch" and r not in seen:
            seen.add(r)
            print(r)


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def stub(name: str, version: str, folder: str) -> None:
    """An empty wheel ``name==version+stub`` without dependencies: pip resolves against it, installs nothing real."""
    dist = f"{norm(name)}-{version}+stub"
    info = f"{dist}.dist-info"
    files = {f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}+stub\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: gpu_wheelhouse\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = [f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b'=').decode()},"
              f"{len(t.encode())}" for p, t in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = "\n".join(record) + "\n"
    with zipfile.ZipFile(Path(folder) / f"{dist}-py3-none-any.whl", "w") as z:
        for p, t in files.items():
            z.writestr(p, t)


def versions(report: str, *names: str) -> None:
    """``name==version`` of each of ``names`` that pip's --report resolved (a name it did not need is left out)."""
    got = {norm(i["metadata"]["name"]): i["metadata"]["version"] for i in json.loads(Path(report).read_text())["install"]}
    for n in names:
        if norm(n) in got:
            print(f"{n}=={got[norm(n)]}")


def slim(wheel: str, *basenames: str) -> None:
    """Rewrite ``wheel`` without the members whose file name is one of ``basenames`` (and their RECORD lines)."""
    path = Path(wheel)
    tmp = path.with_suffix(".slim")
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            if item.filename.rsplit("/", 1)[-1] in basenames:
                continue
            data = src.read(item)
            if item.filename.endswith(".dist-info/RECORD"):
                data = b"".join(line for line in data.splitlines(keepends=True)
                                if line.split(b",")[0].rsplit(b"/", 1)[-1].decode() not in basenames)
            dst.writestr(item, data)
    tmp.replace(path)


def pins(folder: str) -> None:
    """requirements.txt lines (``name==version``) of the wheels in ``folder``."""
    for whl in sorted(Path(folder).glob("*.whl")):
        name, version = whl.name.split("-")[:2]
        print(f"{name}=={version}")


getattr(sys.modules[__name__], sys.argv[1])(*sys.argv[2:])
PY
helper() { "$python" "$work/helper.py" "$@"; }

target=(--only-binary=:all: --python-version "$py_version" --implementation cp)
for p in "${platforms[@]}"; do target+=(--platform "$p"); done
pipq=("$python" -m pip --disable-pip-version-check)

# build_set NAME REQUIREMENTS_FILE SKIP...: resolve, stand in for torch and the skipped, download the rest
build_set() {
    local name="$1" reqs="$2"; shift 2
    local dest="$out/$name" started=$SECONDS stubs="$work/stubs_$name"
    rm -rf "$dest"; mkdir -p "$dest" "$stubs"
    local stand_ins=()
    if [[ $with_torch == 0 ]]; then
        helper stub torch "$torch_version" "$stubs"
        stand_ins+=("torch==$torch_version+stub")
    fi
    if [[ $# -gt 0 ]]; then
        # pass 1: which versions would the skipped packages have? (a dry run reads metadata only)
        "${pipq[@]}" install --quiet --dry-run --ignore-installed --target "$work/dry_$name" --report "$work/$name.json" \
            "${target[@]}" --find-links "$stubs" -r "$reqs" "${stand_ins[@]}" \
            || die "pip could not resolve the $name set for python $py_version on ${platforms[*]}"
        local pinned
        for pinned in $(helper versions "$work/$name.json" "$@"); do
            helper stub "${pinned%%==*}" "${pinned#*==}" "$stubs"
            stand_ins+=("$pinned+stub")
        done
    fi
    echo "gpu_wheelhouse: $name: downloading for python $py_version (${platforms[*]}); stand-ins: ${stand_ins[*]:-none}"
    "${pipq[@]}" download --quiet --dest "$dest" "${target[@]}" --find-links "$stubs" -r "$reqs" "${stand_ins[@]}" \
        || die "pip download of the $name set failed (see above)"
    rm -f "$dest"/*+stub-py3-none-any.whl
    helper pins "$dest" >"$dest/requirements.txt"
    printf '%s\n' "${stand_ins[@]}" | sed 's/+stub$//' >"$dest/left_out.txt"
    echo "gpu_wheelhouse: $name: $(ls "$dest"/*.whl | wc -l) wheels, $(du -sh "$dest" | cut -f1), $((SECONDS - started)) s"
}

helper setup_requirements "$repo/setup.py" "$extras" >"$work/sfx_reqs.txt"
build_set sfx "$work/sfx_reqs.txt" ${skip[@]+"${skip[@]}"}

if [[ $with_sf == 1 ]]; then
    # as bench/setup_sample_factory.sh installs it: its vizdoom extra when doom is asked for, numpy<2
    sf_req="sample-factory==2.1.1"
    [[ ",$extras," == *",doom,"* ]] && sf_req="sample-factory[vizdoom]==2.1.1"
    printf '%s\n' "$sf_req" "numpy<2" >"$work/sf_reqs.txt"
    [[ ",$extras," == *",doom,"* ]] && echo "vizdoom<2.0" >>"$work/sf_reqs.txt"
    build_set sf "$work/sf_reqs.txt" ${sf_skip[@]+"${sf_skip[@]}"}
    # a wheel both sets need (vizdoom, faster-fifo ...) is kept once, in sfx/; sf/requirements.txt still names it
    for whl in "$out"/sf/*.whl; do
        [[ -f "$out/sfx/$(basename "$whl")" ]] && rm "$whl"
    done
    if [[ $minimal == 1 ]]; then
        # 8.5 of its 9 MB are two multiplayer maps that doom_basic never loads
        helper slim "$out"/sf/sample_factory-2.1.1-*.whl freedm.wad dwango5.wad
    fi
    echo "gpu_wheelhouse: sf: $(ls "$out"/sf/*.whl | wc -l) wheels not already in sfx/, $(du -sh "$out/sf" | cut -f1)"
fi

cat >"$out/install.sh" <<SH
#!/usr/bin/env bash
# Run on the GPU node from the folder holding this file (python $py_version, no package index needed):
# sfx's dependencies into /tmp/site, Sample Factory 2.1.1's into /tmp/site_sf; left out (the node's own or unused):
# see */left_out.txt.
set -euo pipefail
cd "\$(dirname "\$0")"
python3 -m pip install --no-index --no-deps --no-compile --find-links sfx --target "\${SFX_SITE:-/tmp/site}" -r sfx/requirements.txt
if [ -d sf ]; then
    python3 -m pip install --no-index --no-deps --no-compile --find-links sf --find-links sfx --target "\${SF_SITE:-/tmp/site_sf}" -r sf/requirements.txt
    printf '#!/bin/sh\nPYTHONPATH=%s exec python3 "\$@"\n' "\${SF_SITE:-/tmp/site_sf}" >/tmp/sfpy && chmod +x /tmp/sfpy
fi
echo "then: PYTHONPATH=\${SFX_SITE:-/tmp/site} python3 -m bench.throughput --device=gpu --sf_python=/tmp/sfpy ..."
SH
chmod +x "$out/install.sh"
echo "gpu_wheelhouse: wrote $out ($(du -sh "$out" | cut -f1)); on the node: bash $out/install.sh (from its copy there)"
