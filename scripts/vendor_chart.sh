#!/usr/bin/env bash
# Re-vendors uPlot (MIT) into the dashboard's static files from the npm registry.
# Run only to upgrade: the files are committed, nothing is fetched at run time.
set -euo pipefail
VERSION="${1:-1.6.32}"
DEST="$(cd "$(dirname "$0")/.." && pwd)/autoscaler/api/static"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
(cd "$TMP" && npm pack --silent "uplot@${VERSION}" >/dev/null && tar xzf "uplot-${VERSION}.tgz")
cp "$TMP/package/dist/uPlot.iife.min.js" "$DEST/uPlot.iife.min.js"
cp "$TMP/package/dist/uPlot.min.css" "$DEST/uPlot.min.css"
cp "$TMP/package/LICENSE" "$DEST/uPlot.LICENSE"
echo "vendored uPlot ${VERSION} into ${DEST}"
