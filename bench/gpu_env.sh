# Source from the repository root on the GPU machine (no network): installs the grader's wheels from .whl/
# (bench/fetch_gpu_wheels.sh) under /opt/site and unpacks bubblewrap from .deb/ (apt-get download bubblewrap)
# under /opt/bwrap; /opt, not /tmp, because the sandbox mounts an empty /tmp.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /opt/site .whl/*.whl
for deb in .deb/*.deb; do dpkg -x "$deb" /opt/bwrap; done
export PYTHONPATH=/opt/site:$PWD PATH=/opt/bwrap/usr/bin:/opt/site/bin:$PATH PYTHONUNBUFFERED=1
