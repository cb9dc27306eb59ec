#!/bin/sh
# Installs the Debian packages ctimm builds and tests with, when any is
# missing (so it is quick on a machine that has them). Needs root for apt-get.
set -eu
# g++: the SIMT harness (runtime/cuda_sim/simt.h) compiles CUDA C kernels for the host as C++.
packages="cmake make gcc g++ pkg-config libcjson-dev libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev libxxhash-dev libyaml-dev libopenblas-openmp-dev libdnnl-dev graphviz libopenmpi-dev openmpi-bin"
missing=""
for p in $packages; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "install-deps: installing$missing"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq $missing
