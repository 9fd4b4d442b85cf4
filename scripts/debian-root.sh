#!/usr/bin/env bash
# A Debian root for the package e2e (tests/e2e/test_e2e_deb.py), made once and cached:
#   bash scripts/debian-root.sh 13 /var/cache/phasewatch-e2e/trixie
# mmdebstrap (apt-get install mmdebstrap) from Debian's archive, minbase with what the package
# depends on and what the tests use; remade only when this list changes (the stamp file).
set -euo pipefail
release="$1"; root="$2"
case "$release" in
  13) suite=trixie ;;
  *) echo "debian-root.sh: no suite for Debian $release" >&2; exit 64 ;;
esac
packages="systemd,dbus,polkitd,python3,python3-systemd,python3-pystemd,python3-httpx,python3-prometheus-client,python3-yaml,man-db,iproute2,procps"
stamp="$suite $packages"
if [ -f "$root/.phasewatch-root" ] && [ "$(cat "$root/.phasewatch-root")" = "$stamp" ]; then
  exit 0
fi
command -v mmdebstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap
rm -rf "$root.tmp" "$root.tar"
mkdir -p "$(dirname "$root")"
mmdebstrap --quiet --variant=minbase --include="$packages" "$suite" "$root.tar"
mkdir -p "$root.tmp"
tar -C "$root.tmp" -xf "$root.tar"
rm -f "$root.tar"
echo "$stamp" > "$root.tmp/.phasewatch-root"
rm -rf "$root"
mv "$root.tmp" "$root"
