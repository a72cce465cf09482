#!/usr/bin/env bash
# Installs the Debian 12 (bookworm) packages sweetspot builds and runs with. Does nothing when
# they are all present. Catch2 v3 comes from bookworm-backports (bookworm itself has v2).
# The CUDA toolkit is not a Debian package: it is used from /usr/local/cuda when present. Slurm and
# munge are for the test of `sweetspot submit` against a real Slurm (tests/slurm_array.sh), which
# starts its own daemons and stops them.
set -euo pipefail

packages=(build-essential cmake ninja-build ccache pkg-config git
          libboost-program-options-dev libsqlite3-dev sqlite3 libtomlplusplus-dev libopenblas-dev nlohmann-json3-dev
          python3 python3-matplotlib python3-pandas chromium
          slurm-wlm slurmctld slurmd slurm-client slurm-wlm-basic-plugins munge)

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
catch2_v3() { installed catch2 && [[ "$(dpkg-query -W -f='${Version}' catch2)" == 3.* ]]; }

missing=()
for p in "${packages[@]}"; do installed "$p" || missing+=("$p"); done
need_catch2=0
catch2_v3 || need_catch2=1

if [[ ${#missing[@]} -eq 0 && $need_catch2 -eq 0 ]]; then
    echo "install-deps: all dependencies are installed"
    exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]} catch2" >&2; exit 1; }
    sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive

if [[ $need_catch2 -eq 1 ]]; then
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    if [[ "$codename" == bookworm ]] && ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
        echo "install-deps: adding bookworm-backports (for Catch2 v3)"
        echo "deb http://deb.debian.org/debian bookworm-backports main" |
            "${sudo[@]}" tee /etc/apt/sources.list.d/bookworm-backports.list >/dev/null
    fi
fi

echo "install-deps: installing ${missing[*]}$([[ $need_catch2 -eq 1 ]] && echo ' catch2 (v3)')"
"${sudo[@]}" apt-get update -qq
if [[ ${#missing[@]} -gt 0 ]]; then
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if [[ $need_catch2 -eq 1 ]]; then
    if [[ "$(. /etc/os-release && echo "${VERSION_CODENAME:-}")" == bookworm ]]; then
        "${sudo[@]}" apt-get install -y -qq --no-install-recommends -t bookworm-backports catch2
    else
        "${sudo[@]}" apt-get install -y -qq --no-install-recommends catch2
    fi
    catch2_v3 || { echo "install-deps: Catch2 v3 is required; this system offers $(dpkg-query -W -f='${Version}' catch2)" >&2; exit 1; }
fi
echo "install-deps: done"
