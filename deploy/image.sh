#!/usr/bin/env bash
# Builds ptc-engine's container image (OCI) without a Docker daemon: stages deploy/Containerfile's
# context (the binary, the component compiled ahead, the shared libraries and CA certificates)
# and builds it with buildah (Debian's package `buildah`; running it takes `podman`).
#
# Usage: deploy/image.sh [TAG]     (`just image`)
#   TAG             defaults to localhost/ptc-engine:<the binary's version>
#   PTC_ENGINE_BIN  the binary to put in, instead of building it (cargo build --release)
# Needs Linux with glibc (ldd), Debian's CA certificates (/etc/ssl/certs/ca-certificates.crt) and
# buildah. The last line printed is the image's tag.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"

for tool in buildah ldd; do
    command -v "$tool" >/dev/null || { echo "deploy/image.sh: $tool not found (Debian: apt-get install buildah podman)" >&2; exit 1; }
done
certs=/etc/ssl/certs/ca-certificates.crt
[ -f "$certs" ] || { echo "deploy/image.sh: $certs not found (Debian: apt-get install ca-certificates)" >&2; exit 1; }

bin="${PTC_ENGINE_BIN:-}"
if [ -z "$bin" ]; then
    (cd "$root" && cargo build --release --locked -p ptc-server --bin ptc-engine)
    bin="${CARGO_TARGET_DIR:-$root/target}/release/ptc-engine"
fi
version="$("$bin" --version | awk '{print $2}')"
tag="${1:-localhost/ptc-engine:$version}"

ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx"/{base/etc/ssl/certs,base/tmp,writable/var/cache/ptc,writable/data/files,binary/usr/local/bin}
chmod 1777 "$ctx/base/tmp"

# The libraries at the paths the binary asks for (its interpreter's, and the default search
# path's), as files: the image has no /etc/ld.so.cache and no symlinked /lib.
for lib in $(ldd "$bin" | grep -o '/[^ ]*'); do
    install -D -m 0755 "$(readlink -f "$lib")" "$ctx/base$lib"
done
cp "$certs" "$ctx/base/etc/ssl/certs/"
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nptc:x:10001:10001:ptc-engine:/nonexistent:/usr/sbin/nologin\n' >"$ctx/base/etc/passwd"
printf 'root:x:0:\nptc:x:10001:\n' >"$ctx/base/etc/group"

# Compiled with the engine settings the image runs with (its defaults), so that the server loads
# it: no PTC_* variable of this shell may change them.
env -i PATH="$PATH" PTC_LOG=warn "$bin" compile --out "$ctx/component/usr/lib/ptc-engine" >/dev/null
install -m 0755 "$bin" "$ctx/binary/usr/local/bin/ptc-engine"

# One layer: the binary is 81 of its 91 MB, so layers apart would spare a pull little, and
# `--layers` would leave its cache images behind at every build.
buildah build --quiet --layers=false -f "$here/Containerfile" -t "$tag" "$ctx" >/dev/null
echo "$tag"
