#!/usr/bin/env bash
# Builds the sandbox image for machines with no image registry: a minimal Debian root made by
# debootstrap; the host's own Python interpreter and standard library copied in (jobs run on
# the same Python as on the local backend); Python packages installed by the host's pip (which
# finds the local CPU torch wheel and honours the constraints; a pip inside the chroot would
# fetch a CUDA build) into that Python's own site-packages (`datasets` hashes code found outside
# a site-packages folder by value, which fails on pyarrow types); then `docker import`. Tagged by
# a hash of its recipe, rebuilt only when that changes. Prints the tag.
set -euo pipefail
cd "$(dirname "$0")/.."
pybase=$(.venv/bin/python -c 'import sys; print(sys.base_prefix)')
pyver=$(.venv/bin/python -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
recipe=$( (cat docker/build-test-image.sh docker/requirements-sandbox.txt constraints.txt;
           .venv/bin/python -VV) | sha256sum | cut -c1-12)
tag="a2rl-sandbox-test:$recipe"
if docker image inspect "$tag" >/dev/null 2>&1; then echo "$tag"; exit 0; fi
mirror=$( (grep -hoE '^(URIs:|deb) +https?://[^ ]+' /etc/apt/sources.list \
           /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null || true) \
         | head -n1 | awk '{print $2}')
[ -n "$mirror" ] || { echo "build-test-image: no Debian mirror configured in apt sources" >&2; exit 1; }
command -v debootstrap >/dev/null || { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
root=$(mktemp -d /var/tmp/a2rl-rootfs.XXXXXX)
trap 'rm -rf "$root"' EXIT
echo "build-test-image: debootstrap into $root" >&2
debootstrap --variant=minbase --include=procps,ca-certificates,libexpat1,libffi8,libssl3,zlib1g,libbz2-1.0,liblzma5,libsqlite3-0 \
  bookworm "$root" "$mirror" >/dev/null
echo "build-test-image: copying Python $pyver from $pybase" >&2
mkdir -p "$root/opt/a2rl/python"
(cd "$pybase" && tar -c --exclude="lib/python$pyver/site-packages/*" \
  --exclude="lib/python$pyver/test" --exclude='__pycache__' --exclude="lib/python$pyver/idlelib" \
  --exclude="lib/python$pyver/tkinter" "bin/python$pyver" $(ls -d lib/libpython* 2>/dev/null) \
  "lib/python$pyver") | tar -C "$root/opt/a2rl/python" -x
ln -sf "/opt/a2rl/python/bin/python$pyver" "$root/usr/local/bin/python3"
echo "build-test-image: installing Python packages with the host's pip" >&2
grep -vE '^\s*(#|$)' docker/requirements-sandbox.txt > "$root/tmp/req.txt"
.venv/bin/python -m pip install -q --disable-pip-version-check --no-compile \
  --target "$root/opt/a2rl/python/lib/python$pyver/site-packages" -c constraints.txt -r "$root/tmp/req.txt" \
  2> >(grep -v "is ignored: it is neither" >&2)
ln -sf "/opt/a2rl/python/bin/python$pyver" "$root/usr/local/bin/python"
echo 'a2rl:x:1000:1000:a2rl sandbox:/tmp:/bin/bash' >> "$root/etc/passwd"
echo 'a2rl:x:1000:' >> "$root/etc/group"
rm -rf "$root/var/cache/apt/archives"/*.deb "$root/tmp/req.txt"
echo "build-test-image: importing" >&2
tar -C "$root" -c . | docker import -c 'ENV LD_LIBRARY_PATH=/opt/a2rl/python/lib' \
  -c 'ENV PATH=/usr/local/bin:/usr/bin:/bin' - "$tag" >/dev/null
docker tag "$tag" a2rl-sandbox-test:latest
# older recipes' images are no longer used
docker images --format '{{.Repository}}:{{.Tag}}' a2rl-sandbox-test \
  | grep -vxF -e "$tag" -e a2rl-sandbox-test:latest | xargs -r docker rmi >/dev/null 2>&1 || true
echo "$tag"
