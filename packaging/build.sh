#!/usr/bin/env bash
# `make package`: build the desktop app (dist/GhostViewer/, PyInstaller onedir), check that its engine starts from
# the frozen executable, then start it under Xvfb as a new user would, time it and take a screenshot
# (dist/package-screenshot.png). Prints the build time, the app's size and its start time.
#
#   packaging/build.sh            VENV=.venv by default; GV_DISPLAY=97; GV_SKIP_BUILD=1 reuses dist/GhostViewer
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PY="$VENV/bin/python"
DISPLAY_NUM=${GV_DISPLAY:-97}
APP=dist/GhostViewer/GhostViewer
SHOT=dist/package-screenshot.png
SYSTEM_PACKAGES=(xvfb libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 imagemagick xdotool)

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
say() { echo "package: $*"; }

# 1. What the window check needs from the system (installed only when run as root).
missing=()
if command -v dpkg >/dev/null; then
    for pkg in "${SYSTEM_PACKAGES[@]}"; do
        dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
    done
fi
if ((${#missing[@]})); then
    if [[ $(id -u) == 0 ]]; then
        say "installing ${missing[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
        say "the window check needs: sudo apt-get install -y ${missing[*]} (the build goes ahead without it)"
    fi
fi

# 2. PyInstaller, into the venv.
if ! "$PY" -m PyInstaller --version >/dev/null 2>&1; then
    say "installing pyinstaller into $VENV"
    "$PY" -m pip install -q pyinstaller
fi

# 3. The build.
if [[ ${GV_SKIP_BUILD:-0} != 1 ]]; then
    say "building with PyInstaller $("$PY" -m PyInstaller --version) (several minutes: it collects torch)"
    start=$(now)
    nice -n 10 "$PY" -m PyInstaller --noconfirm --log-level WARN --distpath dist --workpath build/pyinstaller \
        packaging/ghostviewer.spec
    build_s=$(secs "$start" "$(now)")
    say "built $APP in ${build_s} s"
fi
[[ -x $APP ]] || { say "no $APP: the build failed"; exit 1; }
size=$(du -sh dist/GhostViewer | cut -f1)

# 4. The engine process is the same executable: one 'ready' event and a clean 'bye'.
start=$(now)
engine_err=$(mktemp)
reply=$(echo '{"cmd": "quit"}' | HF_HUB_OFFLINE=1 timeout 120 "$APP" --engine-server 2>"$engine_err" || true)
if grep -q '"event": *"ready"' <<<"$reply" && grep -q '"event": *"bye"' <<<"$reply"; then
    say "engine from the frozen executable: ready and quit in $(secs "$start" "$(now)") s"
    rm -f "$engine_err"
else
    say "the frozen engine did not start; it said: ${reply:-nothing}"
    tail -20 "$engine_err"
    rm -f "$engine_err"
    exit 1
fi

# 5. Start it under Xvfb as a first-time user: time to the window, time to the demo loaded, screenshot.
if ! command -v Xvfb >/dev/null || ! [[ -x /usr/bin/import ]]; then
    say "no Xvfb or ImageMagick: skipped the window check. size: $size"
    exit 0
fi
work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
Xvfb ":$DISPLAY_NUM" -screen 0 1366x768x24 -nolisten tcp >"$work/xvfb.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [[ -e /tmp/.X11-unix/X$DISPLAY_NUM ]] && break; sleep 0.1; done
mkdir -p "$work"/{config,data,cache,state,logs,runs}
export DISPLAY=":$DISPLAY_NUM" XDG_CONFIG_HOME="$work/config" XDG_DATA_HOME="$work/data" \
    XDG_CACHE_HOME="$work/cache" XDG_STATE_HOME="$work/state" GHOSTVIEWER_LOG_DIR="$work/logs" \
    GHOSTVIEWER_RUNS_DIR="$work/runs"

start=$(now)
"$APP" >"$work/app.log" 2>&1 &
app_pid=$!
pids=("$app_pid" "${pids[@]}")
window_s="not measured (no xdotool; waited 20 s)"
if command -v xdotool >/dev/null; then
    for _ in $(seq 900); do
        xdotool search --onlyvisible --name '^GhostViewer$' >/dev/null 2>&1 && { window_s="$(secs "$start" "$(now)") s"; break; }
        kill -0 "$app_pid" 2>/dev/null || { say "the app exited:"; tail -20 "$work/app.log"; exit 1; }
        sleep 0.1
    done
else
    sleep 20
fi
loaded_s="not within 180 s"
for _ in $(seq 1800); do
    if grep -q "loaded " "$work/logs/ghostviewer-gui.log" 2>/dev/null; then loaded_s="$(secs "$start" "$(now)") s"; break; fi
    kill -0 "$app_pid" 2>/dev/null || { say "the app exited:"; tail -20 "$work/app.log"; exit 1; }
    sleep 0.1
done
sleep 2  # let the window draw the loaded state
/usr/bin/import -window root "$SHOT"
kill -TERM "$app_pid" 2>/dev/null || true  # closes the window properly, which stops the engine
for _ in $(seq 100); do kill -0 "$app_pid" 2>/dev/null || break; sleep 0.1; done

say "window log:"
sed 's/^/    /' "$work/logs/ghostviewer-gui.log" 2>/dev/null | tail -8 || true
echo
echo "GhostViewer desktop app: $APP"
[[ -n ${build_s:-} ]] && echo "  build time:        ${build_s} s"
echo "  size:              $size (du -sh dist/GhostViewer)"
echo "  start (to window): $window_s"
echo "  demo loaded at:    $loaded_s"
echo "  screenshot:        $SHOT"
