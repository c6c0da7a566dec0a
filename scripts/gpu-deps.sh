# Sourced (not run) on the GPU machine: unpacks the Debian 12 packages of .debs/ (made by
# scripts/fetch-gpu-debs.sh where there is network, carried with the device call) into a private
# prefix and exports the paths CMake, pkg-config and the loader need to build and run pagellm there.
deps=/tmp/pagellm-deps
if [ -d .debs ] && ls .debs/*.deb >/dev/null 2>&1; then
  if [ ! -f "$deps/.done" ]; then
    rm -rf "$deps" && mkdir -p "$deps"
    for f in .debs/*.deb; do dpkg -x "$f" "$deps"; done
    # Debian's .pc files name /usr; point them at the prefix. openblas.pc normally comes from the
    # alternatives system (not in the .deb): use the pthread flavour's own .pc.
    mkdir -p "$deps/usr/lib/x86_64-linux-gnu/pkgconfig"
    cp "$deps/usr/lib/x86_64-linux-gnu/openblas-pthread/pkgconfig/openblas.pc" "$deps/usr/lib/x86_64-linux-gnu/pkgconfig/"
    ln -sf openblas-pthread/libopenblas.so.0 "$deps/usr/lib/x86_64-linux-gnu/libopenblas.so.0"
    find "$deps" -name '*.pc' -print0 | xargs -0 sed -i -e "s|^prefix=/usr\$|prefix=$deps/usr|" -e "s|=/usr/|=$deps/usr/|g"
    touch "$deps/.done"
  fi
  export PKG_CONFIG_PATH="$deps/usr/lib/x86_64-linux-gnu/pkgconfig:$deps/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export CMAKE_PREFIX_PATH="$deps/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu:$deps/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  command -v pkg-config >/dev/null || export PKG_CONFIG="$deps/usr/bin/pkgconf"
  echo "== deps: unpacked $(ls .debs/*.deb | wc -l) Debian packages into $deps"
fi
