#!/usr/bin/env bash
# OTA update for cosyedge: fast-forward to the configured branch, verify, restart; roll back on failure.
#
#   scripts/update.sh        run by cosyedge-update.timer every night, or by hand
#
# Steps: take the lock; record the running commit; refuse local changes, another branch, a
# non-fast-forward, or an update that would change files under prompts/ outputs/ models/; fetch and
# fast-forward; reinstall requirements only if requirements(-core).txt changed; bring the embedded
# model's derived files up to this version (setup-model); run the self-test; restart the service; wait
# until it answers. If any step after the fast-forward fails, return to the recorded commit, reinstall
# (if requirements had changed), setup-model for it (best effort), restart, and exit non-zero; a
# fast-forward that stops midway without moving HEAD (disk full) is undone in place. Every
# step is logged with a UTC timestamp. Git never touches the content of prompts/, outputs/ or models/
# (ignored files; this script never runs `git clean`); the only write there is setup-model's, to the
# embedded engine's own models/kokoro-int8/.
#
# Exit codes: 0 updated, or already up to date; 1 update failed and was rolled back; 2 another
# update is running; 3 refused: local changes in tracked files; 4 refused: not on the branch, or the
# remote is not a fast-forward; 5 refused: the update would change prompts/ outputs/ models/;
# 6 fetch failed (nothing changed); 7 rollback failed: a person must look (see the log).
#
# Environment (all optional; the update unit reads /etc/cosyedge.env like the app):
#   COSYEDGE_APP_DIR       the checkout to update (default: the directory above this script)
#   COSYEDGE_REMOTE        git remote to follow (default origin)
#   COSYEDGE_BRANCH        branch to follow (default main)
#   COSYEDGE_UPDATE_LOG    log file (default $APP_DIR/var/log/update.log)
#   COSYEDGE_PYTHON        interpreter (default $APP_DIR/.venv/bin/python)
#   COSYEDGE_SELFTEST_CMD  verification (default: $PYTHON -m cosyedge selftest)
#   COSYEDGE_INSTALL_CMD   reinstall (default: $PYTHON -m pip install -r requirements.txt)
#   COSYEDGE_MODEL_CMD     bring the embedded model's derived files up to this version (default:
#                          $PYTHON -m cosyedge setup-model: only verifies when they are current)
#   COSYEDGE_RESTART_CMD   restart (default: systemctl restart $COSYEDGE_SYSTEMD_UNIT when that unit is
#                          installed, otherwise stop the pid in $COSYEDGE_PIDFILE and start
#                          `$PYTHON app.py $COSYEDGE_APP_ARGS` in the background)
#   COSYEDGE_HEALTH_CMD    after the restart (default: wait up to $COSYEDGE_HEALTH_TIMEOUT s, default
#                          120, for http://127.0.0.1:$COSYEDGE_PORT/health; set it empty to skip)
#   COSYEDGE_SYSTEMD_UNIT  default cosyedge.service
#   COSYEDGE_PIDFILE       default $APP_DIR/var/run/cosyedge.pid (pid-file mode only)
#   COSYEDGE_APP_ARGS      default "--device edge --quantized" (pid-file mode only)
# Overridden commands run with bash -c in $APP_DIR.
#
# When run as root (the systemd update unit), git, pip, the self-test and a pid-file app run as the
# owner of $APP_DIR; only the systemctl restart needs root.

set -uo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
APP_DIR="$(cd "${COSYEDGE_APP_DIR:-$script_dir/..}" && pwd)" || { echo "update: no app dir" >&2; exit 7; }
REMOTE="${COSYEDGE_REMOTE:-origin}"
BRANCH="${COSYEDGE_BRANCH:-main}"
LOG="${COSYEDGE_UPDATE_LOG:-$APP_DIR/var/log/update.log}"
LOCK="${COSYEDGE_UPDATE_LOCK:-$APP_DIR/var/run/update.lock}"
PIDFILE="${COSYEDGE_PIDFILE:-$APP_DIR/var/run/cosyedge.pid}"
APP_LOG="${COSYEDGE_APP_LOG:-$APP_DIR/var/log/app.log}"
PYTHON="${COSYEDGE_PYTHON:-$APP_DIR/.venv/bin/python}"
UNIT="${COSYEDGE_SYSTEMD_UNIT:-cosyedge.service}"
APP_ARGS="${COSYEDGE_APP_ARGS:---device edge --quantized}"
HEALTH_TIMEOUT="${COSYEDGE_HEALTH_TIMEOUT:-120}"
PROTECTED_DIRS=(prompts outputs models)
LOG_MAX_BYTES=1048576

OWNER=""
OLD=""
NEW=""
ABSENT=()  # files the new version adds that are not in the checkout before the fast-forward

log() {
    local line
    line="$(date -u +%Y-%m-%dT%H:%M:%SZ) [update $$] $*"
    printf '%s\n' "$line" >>"$LOG"
    printf '%s\n' "$line" >&2
}

# Run a command as the checkout's owner (when we are root and the owner is not), in APP_DIR.
as_owner() {
    if [ "$(id -u)" = 0 ] && [ -n "$OWNER" ] && [ "$OWNER" != root ]; then
        (cd "$APP_DIR" && runuser -u "$OWNER" -- "$@")
    else
        (cd "$APP_DIR" && "$@")
    fi
}

# step NAME CMD...: log, run with its output into the log, log the outcome; returns the exit code.
step() {
    local name="$1"
    shift
    log "step $name: start"
    "$@" >>"$LOG" 2>&1
    local rc=$?
    if [ "$rc" = 0 ]; then log "step $name: ok"; else log "step $name: FAILED (exit $rc)"; fi
    return "$rc"
}

git_() { as_owner git "$@"; }

requirements_changed() {  # between two commits
    ! git_ diff --quiet "$1" "$2" -- requirements.txt requirements-core.txt
}

install_requirements() {
    if [ -n "${COSYEDGE_INSTALL_CMD:-}" ]; then
        as_owner bash -c "$COSYEDGE_INSTALL_CMD"
    else
        as_owner "$PYTHON" -m pip install --disable-pip-version-check -q -r requirements.txt
    fi
}

prepare_model() {  # the embedded engine's derived runtime graph is per version (export/kokoro/assembly.RUNTIME_VERSION)
    if [ -n "${COSYEDGE_MODEL_CMD:-}" ]; then
        as_owner bash -c "$COSYEDGE_MODEL_CMD"
    else
        as_owner "$PYTHON" -m cosyedge setup-model
    fi
}

run_selftest() {
    if [ -n "${COSYEDGE_SELFTEST_CMD:-}" ]; then
        as_owner bash -c "$COSYEDGE_SELFTEST_CMD"
    else
        as_owner "$PYTHON" -m cosyedge selftest
    fi
}

systemd_unit_installed() {
    command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ] \
        && systemctl cat "$UNIT" >/dev/null 2>&1
}

pid_is_our_app() {  # the pid is alive and runs app.py (guards against a reused pid)
    local pid="$1"
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null \
        && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'app\.py'
}

pidfile_restart() {
    local pid="" waited=0
    mkdir -p "$(dirname "$PIDFILE")" "$(dirname "$APP_LOG")"
    [ -f "$PIDFILE" ] && pid="$(cat "$PIDFILE" 2>/dev/null)"
    if pid_is_our_app "$pid"; then
        echo "stopping app pid $pid"
        kill -TERM "$pid" 2>/dev/null
        while pid_is_our_app "$pid" && [ "$waited" -lt 200 ]; do sleep 0.1; waited=$((waited + 1)); done
        if pid_is_our_app "$pid"; then
            echo "pid $pid ignored TERM for 20 s; killing it"
            kill -KILL "$pid" 2>/dev/null
            sleep 0.5
        fi
    else
        echo "no running app recorded in $PIDFILE"
    fi
    rm -f "$PIDFILE"
    # An app this script does not know of (started by hand, without the pid file) still holds the
    # port: the new one could not bind it, and the health check would hear the old one answer.
    if (exec 3<>"/dev/tcp/127.0.0.1/${COSYEDGE_PORT:-7860}") 2>/dev/null; then
        echo "127.0.0.1:${COSYEDGE_PORT:-7860} is still served by a process whose pid is not in $PIDFILE" \
            "(an app started by hand?); stop it, then start the app with this script or systemd"
        return 1
    fi
    # The app must not inherit the lock (fd 9), or the next update would find the lock held.
    # setsid detaches it from this script's session; setpriv drops root without forking, so $! is
    # the app's own pid.
    local -a drop=()
    if [ "$(id -u)" = 0 ] && [ -n "$OWNER" ] && [ "$OWNER" != root ]; then
        drop=(setpriv "--reuid=$OWNER" "--regid=$(id -g "$OWNER")" --init-groups --)
    fi
    # shellcheck disable=SC2086  # APP_ARGS is a list of words on purpose
    (cd "$APP_DIR" && exec 9>&- && exec setsid "${drop[@]}" "$PYTHON" app.py $APP_ARGS \
        >>"$APP_LOG" 2>&1 </dev/null) &
    local new_pid=$!
    echo "$new_pid" >"$PIDFILE"
    echo "started app pid $new_pid ($PYTHON app.py $APP_ARGS), output in $APP_LOG"
    sleep 1
    if ! kill -0 "$new_pid" 2>/dev/null; then
        echo "the app exited at once; last lines of $APP_LOG:"
        tail -n 20 "$APP_LOG"
        return 1
    fi
}

restart_app() {
    if [ -n "${COSYEDGE_RESTART_CMD:-}" ]; then
        (cd "$APP_DIR" && exec 9>&- && bash -c "$COSYEDGE_RESTART_CMD")
    elif systemd_unit_installed; then
        echo "systemctl restart $UNIT"
        systemctl restart "$UNIT" 9>&-
    else
        pidfile_restart
    fi
}

check_health() {
    if [ -n "${COSYEDGE_HEALTH_CMD+set}" ]; then
        [ -z "$COSYEDGE_HEALTH_CMD" ] && { echo "health check skipped (COSYEDGE_HEALTH_CMD is empty)"; return 0; }
        (cd "$APP_DIR" && bash -c "$COSYEDGE_HEALTH_CMD")
        return
    fi
    local url="http://127.0.0.1:${COSYEDGE_PORT:-7860}/health"
    "$PYTHON" - "$url" "$HEALTH_TIMEOUT" <<'PY'
import sys, time, urllib.error, urllib.request

url, limit = sys.argv[1], float(sys.argv[2])
deadline = time.monotonic() + limit
while True:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            print(f"{url} answered {response.status}")
            sys.exit(0)
    except urllib.error.HTTPError as exc:
        if exc.code < 500:  # up, e.g. behind auth
            print(f"{url} answered {exc.code}")
            sys.exit(0)
    except Exception:
        pass
    if time.monotonic() > deadline:
        print(f"no healthy answer from {url} within {limit:.0f} s")
        sys.exit(1)
    time.sleep(1)
PY
}

rollback() {
    log "ROLLBACK: returning to $OLD (update to $NEW failed at: $1)"
    if ! step "reset to $OLD" git_ reset --hard --quiet "$OLD"; then
        log "ROLLBACK FAILED: could not reset to $OLD; a person must look"
        exit 7
    fi
    if requirements_changed "$OLD" "$NEW"; then
        step "reinstall old requirements" install_requirements \
            || { log "ROLLBACK FAILED: reinstalling the old requirements failed"; exit 7; }
    fi
    # best effort: the old version runs on newer derived files too, only slower (it warns)
    step "embedded model for the old version" prepare_model || log "the old version's setup-model failed; it runs its plain graph"
    if ! step "restart old version" restart_app || ! step "health of old version" check_health; then
        log "ROLLBACK FAILED: the old version $OLD does not come back up; a person must look"
        exit 7
    fi
    log "rolled back: $OLD is running again"
    exit 1
}

# After a fast-forward that failed without moving HEAD: a checkout cut short (a full disk) has
# written part of the new version, one file truncated. Remove the new files it wrote (first: that
# frees the space git needs), then put the recorded commit's files back; true when the checkout is
# as it was.
restore_checkout() {
    local path
    for path in "${ABSENT[@]}"; do
        if [ -e "$APP_DIR/$path" ] || [ -L "$APP_DIR/$path" ]; then
            echo "removing $path (written by the failed fast-forward)"
            as_owner rm -f -- "$path" || return 1
        fi
    done
    git_ reset --hard --quiet "$OLD" && [ -z "$(git_ status --porcelain --untracked-files=no)" ]
}

rotate_log() {
    local size
    size="$(stat -c %s "$LOG" 2>/dev/null || echo 0)"
    [ "$size" -gt "$LOG_MAX_BYTES" ] && mv -f "$LOG" "$LOG.1"
    return 0
}

main() {
    mkdir -p "$(dirname "$LOG")" "$(dirname "$LOCK")" || { echo "update: cannot create log dir" >&2; exit 7; }
    rotate_log
    exec 9>>"$LOCK"
    if ! flock -n 9; then
        log "another update is running (lock $LOCK is held); nothing done"
        exit 2
    fi
    OWNER="$(stat -c %U "$APP_DIR")"
    log "update of $APP_DIR from $REMOTE/$BRANCH (as $(id -un), checkout owned by $OWNER)"

    if ! OLD="$(git_ rev-parse --verify HEAD 2>>"$LOG")"; then
        log "refused: $APP_DIR is not a git checkout"
        exit 4
    fi
    log "running commit: $OLD"
    local current
    current="$(git_ symbolic-ref --quiet --short HEAD 2>/dev/null)"
    if [ "$current" != "$BRANCH" ]; then
        log "refused: the checkout is on '${current:-detached HEAD}', not '$BRANCH'"
        exit 4
    fi
    local dirty
    dirty="$(git_ status --porcelain --untracked-files=no)"
    if [ -n "$dirty" ]; then
        log "refused: local changes in tracked files (commit, stash or revert them first):"
        printf '%s\n' "$dirty" | while IFS= read -r line; do log "  $line"; done
        exit 3
    fi

    if ! step "fetch $REMOTE $BRANCH" git_ fetch --quiet "$REMOTE" "refs/heads/$BRANCH"; then
        log "fetch failed; nothing changed"
        exit 6
    fi
    NEW="$(git_ rev-parse --verify 'FETCH_HEAD^{commit}')"
    if [ "$NEW" = "$OLD" ]; then
        log "already up to date at $OLD"
        exit 0
    fi
    if ! git_ merge-base --is-ancestor "$OLD" "$NEW"; then
        log "refused: $REMOTE/$BRANCH ($NEW) is not a fast-forward of $OLD (history was rewritten, or local commits)"
        exit 4
    fi
    local touched
    touched="$(git_ diff --name-only "$OLD" "$NEW" -- "${PROTECTED_DIRS[@]}" \
        | grep -Ev '^(prompts|outputs|models)/README\.md$')"
    if [ -n "$touched" ]; then
        log "refused: the update would change data under prompts/ outputs/ models/:"
        printf '%s\n' "$touched" | while IFS= read -r line; do log "  $line"; done
        exit 5
    fi
    log "updating $OLD -> $NEW ($(git_ rev-list --count "$OLD..$NEW") commit(s))"

    local path
    while IFS= read -r -d '' path; do
        [ -e "$APP_DIR/$path" ] || [ -L "$APP_DIR/$path" ] || ABSENT+=("$path")
    done < <(git_ diff -z --name-only --no-renames --diff-filter=A "$OLD" "$NEW")
    if ! step "fast-forward to $NEW" git_ merge --ff-only --quiet "$NEW"; then
        if [ "$(git_ rev-parse HEAD)" = "$OLD" ]; then
            if ! step "restore the files of $OLD" restore_checkout; then
                log "ROLLBACK FAILED: the checkout may hold part of $NEW; once the cause above is fixed" \
                    "(a full disk?), run 'git reset --hard $OLD' in $APP_DIR; a person must look"
                exit 7
            fi
            log "fast-forward failed (an untracked file in the way, or a full disk?); $OLD is in place"
            exit 1
        fi
        rollback "fast-forward"
    fi
    if requirements_changed "$OLD" "$NEW"; then
        step "install requirements (requirements.txt changed)" install_requirements || rollback "install"
    else
        log "requirements.txt unchanged; not reinstalling"
    fi
    step "embedded model (setup-model: re-derives only what this version changed)" prepare_model || rollback "model"
    step "self-test" run_selftest || rollback "self-test"
    step "restart" restart_app || rollback "restart"
    step "health" check_health || rollback "health"
    log "updated: $NEW is running (was $OLD)"
    exit 0
}

# Everything runs from inside main, which bash has fully read before the fast-forward replaces this file.
main "$@"
