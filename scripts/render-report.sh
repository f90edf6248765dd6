#!/usr/bin/env bash
# Renders the run's report to pictures with headless Chromium, so that it can be looked at
# without a browser:   scripts/render-report.sh [EVIDENCE_DIR]      (default: evidence)
#   EVIDENCE_DIR/report-N.png       the whole report page, in pages of at most 8000 px, checked
#                                   whole (exit 1 when the pages miss the report's end)
#   EVIDENCE_DIR/timeline-<CASE>.png one picture per timeline (F4 … F9)
# Installs the Debian package chromium-headless-shell when missing and running as root.
set -euo pipefail
cd "$(dirname "$0")/.."
ev=$(realpath "${1:-evidence}")
[ -f "$ev/report.html" ] || { echo "render-report: no $ev/report.html: run ./run.sh first" >&2; exit 2; }

chrome=$(command -v chromium-headless-shell || command -v chromium || true)
if [ -z "$chrome" ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "render-report: installing chromium-headless-shell with apt-get" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium-headless-shell fonts-dejavu-core >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium-headless-shell fonts-dejavu-core >/dev/null 2>&1; }
    chrome=$(command -v chromium-headless-shell || true)
  fi
  [ -n "$chrome" ] || { echo "render-report: needs headless Chromium (apt-get install -y chromium-headless-shell)" >&2; exit 2; }
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
shot() { # html-file png-file width height
  "$chrome" --no-sandbox --disable-gpu --hide-scrollbars --window-size="$3,$4" --screenshot="$2" "file://$1" >/dev/null 2>&1
}
# The whole report, never cut: its height measured by Chromium itself (the DOM dumped after a
# script wrote it), then rendered in pages of at most 8000 px (report-1.png, report-2.png, …),
# each the page shifted up by the ones before it.
# The page ends with a marker bar in a colour nothing else uses: the last page must show it, or the
# report was cut (checked below, and the script fails).
mkdir -p "$work/whole"
marker='<div id="render-end" style="height:6px;background:#ff00ff;margin-top:12px"></div>'
sed "s|</body>|$marker</body>|" "$ev/report.html" >"$work/whole/report.html"
sed 's#</body>#<script>document.body.setAttribute("data-height", document.documentElement.scrollHeight)</script></body>#' \
  "$work/whole/report.html" >"$work/whole/measure.html"
height=$("$chrome" --no-sandbox --disable-gpu --window-size=1040,1000 --dump-dom "file://$work/whole/measure.html" 2>/dev/null \
  | grep -o 'data-height="[0-9]*"' | grep -o '[0-9]*' | head -1)
[ -n "$height" ] || { echo "render-report: could not measure the report's height" >&2; exit 1; }
rm -f "$ev"/report.png "$ev"/report-[0-9]*.png
page=8000
pages=$(( (height + page - 1) / page ))
# RENDER_MAX_PAGES (a test's negative control) renders fewer pages than the report needs: the
# check below must then fail.
pages=$(( pages < ${RENDER_MAX_PAGES:-$pages} ? pages : ${RENDER_MAX_PAGES:-$pages} ))
for i in $(seq 0 $((pages - 1))); do
  h=$(( height - i * page < page ? height - i * page : page ))
  sed "s#<head>#<head><style>body{margin-top:-$((i * page))px !important}</style>#" "$work/whole/report.html" >"$work/whole/page-$i.html"
  shot "$work/whole/page-$i.html" "$ev/report-$((i + 1)).png" 1040 "$h"
  echo "render-report: $ev/report-$((i + 1)).png ($h px of the report's $height)"
done
# Whole, or a failure: the pages' heights add up to the report's, and the last page shows the
# end marker in its last rows.
python3 "$(dirname "$0")/png-check.py" "$height" "$ev"/report-[0-9]*.png
# One page per timeline: the SVG of each case, cut out of the report.
python3 - "$ev/report.html" "$work" <<'PY'
import re, sys
html = open(sys.argv[1]).read()
for m in re.finditer(r'<h2 id="([^"]+)"', html):
    # A case named kazoo/F5 (the library card's) is pictured as timeline-kazoo-F5.png.
    case, start = m.group(1).replace("/", "-"), m.end()
    end = html.find('<pre>', start)
    svg = re.search(r'<svg.*?</svg>', html[start:end], re.S)
    if svg:
        height = re.search(r'height="([\d.]+)"', svg.group(0)).group(1)
        open(f"{sys.argv[2]}/{case}.html", "w").write(f'<html><body style="margin:0">{svg.group(0)}</body></html>')
        open(f"{sys.argv[2]}/{case}.height", "w").write(str(int(float(height))))
PY
for page in "$work"/*.html; do
  [ -e "$page" ] || continue  # a report without timelines
  case=$(basename "$page" .html)
  shot "$page" "$ev/timeline-$case.png" 960 "$(cat "$work/$case.height")"
  echo "render-report: $ev/timeline-$case.png"
done
