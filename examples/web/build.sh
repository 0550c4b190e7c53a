#!/usr/bin/env bash
# Builds the browser demo and test pages: lazor and this crate to wasm32-unknown-unknown (release), then the JS
# glue with wasm-bindgen into pkg/. Serve this directory with any static file server and open index.html
# (tests.html runs the browser test suite), e.g. `python3 -m http.server -d examples/web 8000`.
#
# Needs the wasm32 target (`rustup target add wasm32-unknown-unknown`) and the `wasm-bindgen` command of the same
# version as the wasm-bindgen crate in Cargo.lock (`cargo install wasm-bindgen-cli --version <that version>`);
# it says so when either is missing. LAZOR_WEB_PROFILE=dev builds unoptimized (quicker to build).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
    echo "build.sh: the wasm32 target is missing: rustup target add wasm32-unknown-unknown" >&2
    exit 1
fi
want="$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)"
have="$(wasm-bindgen --version 2>/dev/null | awk '{ print $2 }' || true)"
if [ "$have" != "$want" ]; then
    echo "build.sh: wasm-bindgen $want is needed (found: ${have:-none}): cargo install wasm-bindgen-cli --version $want" >&2
    exit 1
fi

profile="${LAZOR_WEB_PROFILE:-release}"
target_dir="${CARGO_TARGET_DIR:-$here/target}"
flag=(--profile "$profile")
out_dir="$profile"
if [ "$profile" = dev ]; then out_dir=debug; fi
cargo build --target wasm32-unknown-unknown "${flag[@]}" --target-dir "$target_dir"
wasm-bindgen --target web --no-typescript --out-dir "$here/pkg" \
    "$target_dir/wasm32-unknown-unknown/$out_dir/lazor_web.wasm"
echo "build.sh: built $here/pkg ($(du -h "$here/pkg/lazor_web_bg.wasm" | cut -f1) of wasm)"
