#!/usr/bin/env bash
# Download the wheels a GPU runner needs for the grader (nbgrader, papermill, ipykernel, ...) into .whl/.
#
# Run from the repository root:  bash bench/fetch_gpu_wheels.sh
# Reads bench/gpu_wheels.txt (one name==version a line; '#' comments and blank lines are skipped) and
# fetches each as a binary wheel for CPython 3.12 on manylinux x86-64, without dependencies, so .whl/
# holds exactly the pinned list. Wheels in .whl/ that are not on the list are removed, so that
#   python3 -m pip install --no-index --no-deps --target /tmp/site .whl/*.whl
# installs exactly that list. Already-downloaded wheels are kept (pip skips them).
# Environment: PYTHON (default python3) runs pip; WHL_DIR (default .whl) is where the wheels go.
set -euo pipefail

LIST=bench/gpu_wheels.txt
DEST=${WHL_DIR:-.whl}
PYTHON=${PYTHON:-python3}

if [[ ! -f $LIST ]]; then
    echo "error: $LIST not found; run this from the repository root" >&2
    exit 1
fi

# name==version lines, comments and surrounding blanks stripped
mapfile -t PINS < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$LIST" | grep -v '^$')
if [[ ${#PINS[@]} -eq 0 ]]; then
    echo "error: no name==version lines in $LIST" >&2
    exit 1
fi
for pin in "${PINS[@]}"; do
    if [[ ! $pin =~ ^[A-Za-z0-9._-]+==[A-Za-z0-9.+!_-]+$ ]]; then
        echo "error: '$pin' in $LIST is not name==version" >&2
        exit 1
    fi
done

mkdir -p "$DEST"
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64)
platform_args=()
for p in "${PLATFORMS[@]}"; do platform_args+=(--platform "$p"); done

for pin in "${PINS[@]}"; do
    echo "fetching $pin"
    "$PYTHON" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
        --python-version 3.12 --implementation cp "${platform_args[@]}" -d "$DEST" "$pin"
done

# Wheel file names carry the normalized name (lower case, runs of -_. as _) and the version.
norm() { tr 'A-Z' 'a-z' <<<"$1" | sed -E 's/[-_.]+/_/g'; }
declare -A wanted=()
for pin in "${PINS[@]}"; do
    wanted["$(norm "${pin%%==*}")-${pin#*==}"]=1
done
declare -A found=()
shopt -s nullglob
for whl in "$DEST"/*.whl; do
    base=$(basename "$whl")
    IFS=- read -r name version _ <<<"$base"
    key="$(norm "$name")-$version"
    if [[ -z ${wanted[$key]:-} ]]; then
        echo "removing $base (not in $LIST)"
        rm -f -- "$whl"
    elif [[ -n ${found[$key]:-} ]]; then
        echo "error: two wheels for $key in $DEST: ${found[$key]} and $base" >&2
        exit 1
    else
        found[$key]=$base
    fi
done
missing=0
for key in "${!wanted[@]}"; do
    if [[ -z ${found[$key]:-} ]]; then
        echo "error: no wheel for $key in $DEST" >&2
        missing=1
    fi
done
[[ $missing -eq 0 ]] || exit 1

count=${#found[@]}
bytes=$(cat "$DEST"/*.whl | wc -c)
echo "$count wheels in $DEST, $bytes bytes ($(( (bytes + 1048575) / 1048576 )) MiB)"
