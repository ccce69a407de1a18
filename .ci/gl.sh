#!/usr/bin/env bash
# Headless OpenGL for the MuJoCo video tests (sourced by .ci/run): Mesa's OSMesa and EGL, as README's install
# section names them. Installs Debian's packages when a library is missing.
set -euo pipefail
if ! ldconfig -p | grep -q 'libOSMesa\.so' || ! ldconfig -p | grep -q 'libEGL_mesa\.so' \
   || ! ldconfig -p | grep -q 'libGL\.so\.1'; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libosmesa6 libegl1 libgl1 >/dev/null
fi
echo "OpenGL for headless frames: $(ldconfig -p | grep -o 'libOSMesa\.so\.[0-9]*' | head -1), $(ldconfig -p | grep -o 'libEGL_mesa\.so\.[0-9]*' | head -1)"
