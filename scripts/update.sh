#!/usr/bin/env bash
# OTA update for cosyedge: fast-forward to the configured branch, verify, restart; roll back on failure.
#
#   scripts/update.sh              the nightly update (cosyedge-update.timer, or cron), or by hand
#   scripts/update.sh --keepalive  at boot and every few minutes (cron, no systemd): finish or roll back
#                                  an interrupted update, start the app when it is not running; no fetch
#
# Steps: take the lock; clear git lock files left by a killed run; finish an interrupted update (below);
# start the app if it is down (pid-file mode); record the running commit; refuse local changes, another
# branch, a non-fast-forward, or an update that would change files under prompts/ outputs/ models/;
# fetch; open the transaction; fast-forward; reinstall requirements only if requirements(-core).txt
# changed; bring the embedded model's derived files up to this version (setup-model); run the self-test;
# restart the service; wait until it answers /health with the new commit; record it as verified.
#
# The update is a transaction kept in $COSYEDGE_UPDATE_STATE_DIR (default var/update/), files of
# key=value lines, each replaced atomically: before the fast-forward, `added` lists the files the new
# commit adds that the checkout lacks and `transaction` records the running commit (old), the target
# (new) and then the step under way. A run that finds a transaction (the last one was killed: a power
# cut, the OOM killer, a reboot) names it in the log and brings the box to a verified commit before
# anything else: killed inside the fast-forward (HEAD still old), the files it wrote are removed, old's
# put back and the fast-forward redone; killed later (HEAD at new), the update goes on from the step it
# was in; killed while rolling back, the rollback is done again; killed $MAX_ATTEMPTS times on the way
# forward, it is rolled back and that commit is not tried again until the remote moves on. `verified`
# names the last commit that passed the self-test and answered after its restart, `last` the outcome
# of the last update; the app's /health reports them (cosyedge/host/update_state.py).
#
# A rollback returns to the recorded commit, reinstalls (if requirements had changed), runs setup-model
# for it (best effort), and restarts only when needed: an app that was never stopped (the failure came
# before the restart step) and still answers /health as the old commit is left alone. A fast-forward
# that stops midway without moving HEAD (a full disk) is undone in place. Every step is logged with a
# UTC timestamp. Git never touches the content of prompts/, outputs/ or models/ (ignored files; this
# script never runs `git clean`; the files it removes are only those `added` lists); the only write there
# is setup-model's, to the embedded engine's own models/kokoro-int8/.
#
# Exit codes: 0 updated, already up to date, or (--keepalive) the app runs; 1 update failed and was
# rolled back; 2 another update is running (--keepalive: 0), or a git command is running in the
# checkout; 3 refused: local changes in tracked files; 4 refused: not on the branch, or the remote is
# not a fast-forward; 5 refused: the update would change prompts/ outputs/ models/; 6 fetch failed
# (nothing changed); 7 rollback failed, or the app does not start: a person must look (see the log).
#
# Environment (all optional; the update unit reads /etc/cosyedge.env like the app):
#   COSYEDGE_APP_DIR       the checkout to update (default: the directory above this script)
#   COSYEDGE_REMOTE        git remote to follow (default origin)
#   COSYEDGE_BRANCH        branch to follow (default main)
#   COSYEDGE_UPDATE_LOG    log file (default $APP_DIR/var/log/update.log)
#   COSYEDGE_UPDATE_STATE_DIR  the transaction's files (default $APP_DIR/var/update; the app reads it too)
#   COSYEDGE_UPDATE_MAX_ATTEMPTS  interrupted tries of one commit before it is rolled back (default 3)
#   COSYEDGE_PYTHON        interpreter (default $APP_DIR/.venv/bin/python)
#   COSYEDGE_SELFTEST_CMD  verification (default: $PYTHON -m cosyedge selftest)
#   COSYEDGE_INSTALL_CMD   reinstall (default: $PYTHON -m pip install -r requirements.txt)
#   COSYEDGE_MODEL_CMD     bring the embedded model's derived files up to this version (default:
#                          $PYTHON -m cosyedge setup-model: only verifies when they are current)
#   COSYEDGE_RESTART_CMD   restart (default: systemctl restart $COSYEDGE_SYSTEMD_UNIT when that unit is
#                          installed, otherwise stop the pid in $COSYEDGE_PIDFILE and start
#                          `$PYTHON app.py $COSYEDGE_APP_ARGS` in the background: pid-file mode)
#   COSYEDGE_HEALTH_CMD    after the restart (default: wait up to $COSYEDGE_HEALTH_TIMEOUT s, default
#                          120, for http://127.0.0.1:$COSYEDGE_PORT/health naming the new commit; set
#                          it empty to skip)
#   COSYEDGE_SYSTEMD_UNIT  default cosyedge.service
#   COSYEDGE_PIDFILE       default $APP_DIR/var/run/cosyedge.pid (pid-file mode only)
#   COSYEDGE_APP_ARGS      default "--device edge --quantized" (pid-file mode only)
#   COSYEDGE_UPDATE_STEP_HOOK  run (bash -c, step name as $1) as each step begins; a seam for the tests
#                          that interrupt the update at every step
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
STATE_DIR="${COSYEDGE_UPDATE_STATE_DIR:-$APP_DIR/var/update}"
MAX_ATTEMPTS="${COSYEDGE_UPDATE_MAX_ATTEMPTS:-3}"
PIDFILE="${COSYEDGE_PIDFILE:-$APP_DIR/var/run/cosyedge.pid}"
APP_LOG="${COSYEDGE_APP_LOG:-$APP_DIR/var/log/app.log}"
PYTHON="${COSYEDGE_PYTHON:-$APP_DIR/.venv/bin/python}"
UNIT="${COSYEDGE_SYSTEMD_UNIT:-cosyedge.service}"
APP_ARGS="${COSYEDGE_APP_ARGS:---device edge --quantized}"
HEALTH_TIMEOUT="${COSYEDGE_HEALTH_TIMEOUT:-120}"
HEALTH_URL="http://127.0.0.1:${COSYEDGE_PORT:-7860}/health"
PROTECTED_DIRS=(prompts outputs models)
LOG_MAX_BYTES=1048576

TXN="$STATE_DIR/transaction"
ADDED="$STATE_DIR/added"        # NUL-separated paths the new commit adds that the checkout lacked
VERIFIED="$STATE_DIR/verified"
LAST="$STATE_DIR/last"
# The steps of the way forward, in order; the transaction records the one under way.
FORWARD_STEPS=(fast-forward install model self-test restart health)
# A failure in one of these leaves the running app as it was: a rollback need not restart it.
BEFORE_RESTART=" fast-forward install model self-test "

KEEPALIVE=no
RECOVERING=no
OWNER=""
OLD=""
NEW=""
REINSTALL=no

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

hook() {  # the tests' seam: COSYEDGE_UPDATE_STEP_HOOK runs as each step begins
    [ -n "${COSYEDGE_UPDATE_STEP_HOOK:-}" ] || return 0
    (cd "$APP_DIR" && bash -c "$COSYEDGE_UPDATE_STEP_HOOK" hook "$1") >>"$LOG" 2>&1
    return 0
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

# --- the transaction's files ------------------------------------------------------------------

# state_write FILE: replace FILE with stdin atomically, on disk before the rename (a power cut
# leaves the old content or the new, never a torn file).
state_write() {
    local file="$1" tmp="$1.tmp.$$"
    cat >"$tmp" && sync "$tmp" 2>/dev/null && mv -f "$tmp" "$file" || { rm -f "$tmp"; return 1; }
    sync "$(dirname "$file")" 2>/dev/null
    if [ "$(id -u)" = 0 ] && [ -n "$OWNER" ]; then chown "$OWNER" "$file" 2>/dev/null; fi
    return 0
}

state_get() {  # state_get FILE KEY: the value, or nothing
    [ -f "$1" ] && sed -n "s/^$2=//p" "$1" | head -n 1
    return 0
}

now_utc() { date -u +%Y-%m-%dT%H:%M:%SZ; }

# txn_write PHASE STEP [ATTEMPT] [FAILED_STEP]; false (logged) when it cannot write. Once the
# transaction is open a missed record is harmless: a recovery would resume from an earlier step,
# and every step can run twice.
txn_write() {
    local attempt="${3:-$(state_get "$TXN" attempt)}" failed="${4:-$(state_get "$TXN" failed)}"
    local started
    started="$(state_get "$TXN" started)"
    printf 'old=%s\nnew=%s\nphase=%s\nstep=%s\nattempt=%s\nreinstall=%s\nstarted=%s\nfailed=%s\n' \
        "$OLD" "$NEW" "$1" "$2" "${attempt:-1}" "$REINSTALL" "${started:-$(now_utc)}" "$failed" \
        | state_write "$TXN" && return 0
    log "cannot write $TXN (disk full?)"
    return 1
}

# The update is over (whatever the outcome): record it, then drop the transaction (last).
txn_close() {  # txn_close RESULT [FAILED_STEP] [REASON]
    printf 'result=%s\nfrom=%s\nto=%s\nstep=%s\nreason=%s\nat=%s\n' "$1" "$OLD" "$NEW" "${2:-}" "${3:-}" \
        "$(now_utc)" | state_write "$LAST"
    rm -f "$TXN" "$ADDED"
    sync "$STATE_DIR" 2>/dev/null
    return 0
}

mark_verified() {  # mark_verified COMMIT HOW
    printf 'commit=%s\nhow=%s\nat=%s\n' "$1" "$2" "$(now_utc)" | state_write "$VERIFIED"
}

# --- the commands the steps run ---------------------------------------------------------------

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

install_if_changed() {
    if [ "$REINSTALL" = yes ]; then
        install_requirements
    else
        echo "requirements.txt unchanged; not reinstalling"
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

pidfile_mode() {  # this script starts and stops the app itself (no systemd unit, no restart command)
    [ -z "${COSYEDGE_RESTART_CMD:-}" ] && ! systemd_unit_installed
}

pid_is_our_app() {  # the pid is alive and runs app.py (guards against a reused pid)
    local pid="$1"
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null \
        && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'app\.py'
}

recorded_pid() { [ -f "$PIDFILE" ] && cat "$PIDFILE" 2>/dev/null; return 0; }

port_served() { (exec 3<>"/dev/tcp/127.0.0.1/${COSYEDGE_PORT:-7860}") 2>/dev/null; }

start_app() {  # pid-file mode: start app.py in the background, its pid in the pid file
    mkdir -p "$(dirname "$PIDFILE")" "$(dirname "$APP_LOG")"
    # The app must not inherit the lock (fd 9), or the next update would find the lock held.
    # setsid detaches it from this script's session (a kill of the update's process group spares
    # it); setpriv drops root without forking, so the pid written is the app's own. The pid file is
    # written before the exec: a run killed in between leaves a dead pid, never an unrecorded app.
    local -a drop=()
    if [ "$(id -u)" = 0 ] && [ -n "$OWNER" ] && [ "$OWNER" != root ]; then
        drop=(setpriv "--reuid=$OWNER" "--regid=$(id -g "$OWNER")" --init-groups --)
    fi
    # shellcheck disable=SC2086  # APP_ARGS is a list of words on purpose
    (cd "$APP_DIR" && exec 9>&- && echo "$BASHPID" >"$PIDFILE" \
        && exec setsid "${drop[@]}" "$PYTHON" app.py $APP_ARGS >>"$APP_LOG" 2>&1 </dev/null) &
    local new_pid=$!
    echo "started app pid $new_pid ($PYTHON app.py $APP_ARGS), output in $APP_LOG"
    sleep 1
    if ! kill -0 "$new_pid" 2>/dev/null; then
        echo "the app exited at once; last lines of $APP_LOG:"
        tail -n 20 "$APP_LOG"
        return 1
    fi
}

pidfile_restart() {
    local pid waited=0
    pid="$(recorded_pid)"
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
    if port_served; then
        echo "127.0.0.1:${COSYEDGE_PORT:-7860} is still served by a process whose pid is not in $PIDFILE" \
            "(an app started by hand?); stop it, then start the app with this script or systemd"
        return 1
    fi
    start_app
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

# probe_health SECONDS [COMMIT]: wait up to SECONDS for /health to answer (any status under 500:
# up, perhaps behind auth); with COMMIT, an answer naming another commit does not count (the old
# app still answering). Prints what answered, ending with "running <commit>" when /health names one.
probe_health() {
    "$PYTHON" - "$HEALTH_URL" "$1" "${2:-}" <<'PY'
import json, sys, time, urllib.error, urllib.request

url, limit, want = sys.argv[1], float(sys.argv[2]), sys.argv[3]
deadline = time.monotonic() + limit
heard = ""
while True:
    status, body = None, b""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status = exc.code
    except Exception:
        pass
    if status is not None and status < 500:
        try:
            commit = json.loads(body).get("commit") or ""
        except Exception:
            commit = ""
        heard = f"{url} answered {status}" + (f", running {commit}" if commit else "")
        if not (want and commit and commit != want):
            print(heard)
            sys.exit(0)
    if time.monotonic() > deadline:
        print(f"no healthy answer naming {want} from {url} within {limit:.0f} s; last: {heard}"
              if want and heard else f"no healthy answer from {url} within {limit:.0f} s")
        sys.exit(1)
    time.sleep(0.5)
PY
}

check_health() {  # check_health [COMMIT]
    if [ -n "${COSYEDGE_HEALTH_CMD+set}" ]; then
        [ -z "$COSYEDGE_HEALTH_CMD" ] && { echo "health check skipped (COSYEDGE_HEALTH_CMD is empty)"; return 0; }
        (cd "$APP_DIR" && bash -c "$COSYEDGE_HEALTH_CMD")
        return
    fi
    probe_health "$HEALTH_TIMEOUT" "${1:-}"
}

# app_runs COMMIT: the app answers /health now and runs COMMIT. An answer that names no commit (an
# app from before /health named it, or behind auth) counts only when this run never stopped it.
app_runs() {
    local answer
    port_served || { echo "nothing listens on 127.0.0.1:${COSYEDGE_PORT:-7860}"; return 1; }
    answer="$(probe_health 15 2>&1)" || return 1
    echo "$answer"
    case "$answer" in
        *", running $1") return 0 ;;
        *", running "*) return 1 ;;
        *) [ "$RECOVERING" = no ] ;;
    esac
}

# pid-file mode: start the app when it is not running (after a reboot or a crash); true when it runs.
ensure_running() {
    pidfile_mode || return 0
    local pid
    pid="$(recorded_pid)"
    pid_is_our_app "$pid" && return 0
    if port_served; then
        [ "$KEEPALIVE" = yes ] || log "the port is served by an app whose pid is not in $PIDFILE; leaving it alone"
        return 0
    fi
    local head
    head="$(git_ rev-parse --verify HEAD 2>/dev/null)"
    log "the app is not running (pid file: ${pid:-none}); starting it at ${head:-?}"
    if step "start app" start_app && step "health" check_health "$head"; then
        return 0
    fi
    log "the app does not start at ${head:-?}: see $APP_LOG; a person must look"
    return 1
}

# --- git's leftovers --------------------------------------------------------------------------

git_running_here() {  # a git process whose working directory is inside the checkout
    local proc comm cwd
    for proc in /proc/[0-9]*; do
        { read -r comm <"$proc/comm"; } 2>/dev/null || continue
        [ "$comm" = git ] || continue
        cwd="$(readlink "$proc/cwd" 2>/dev/null)" || continue
        case "$cwd/" in "$APP_DIR"/*) return 0 ;; esac
    done
    return 1
}

# Lock files a killed git leaves behind (index.lock, HEAD.lock, a ref's .lock) make every later git
# command fail. We hold the update lock, so no update's git is running; with no git process in the
# checkout either, they are stale.
clear_stale_git_locks() {
    local gitdir
    gitdir="$(git_ rev-parse --absolute-git-dir 2>/dev/null)" || return 0
    local -a locks=()
    mapfile -t locks < <(find "$gitdir" -maxdepth 1 -name '*.lock' -type f 2>/dev/null
                         find "$gitdir/refs" -name '*.lock' -type f 2>/dev/null)
    [ "${#locks[@]}" -gt 0 ] || return 0
    if git_running_here; then
        [ "$KEEPALIVE" = yes ] && exit 0  # the owner at work: the next run looks again
        log "git is running in $APP_DIR (it holds ${locks[*]}); not updating now"
        exit 2
    fi
    local what="a git command killed before it finished"
    [ -f "$TXN" ] && what="the interrupted update"
    log "removing git lock files left by $what: ${locks[*]#"$gitdir"/}"
    rm -f -- "${locks[@]}"
}

# Put the recorded commit's files back after a fast-forward that did not finish: first remove the
# files the new commit adds that it may have written (that also frees the space a full disk needs),
# then reset. True when the checkout is old's again.
restore_checkout() {
    if [ -s "$ADDED" ]; then
        echo "removing what the fast-forward wrote of the $(tr -cd '\0' <"$ADDED" | wc -c) file(s) $NEW adds"
        as_owner xargs -0 -r rm -f -- <"$ADDED" || return 1
        local path
        while IFS= read -r -d '' path; do
            case "$path" in */*) printf '%s\0' "${path%/*}" ;; esac
        done <"$ADDED" | sort -zur | as_owner xargs -0 -r rmdir -p --ignore-fail-on-non-empty -- 2>/dev/null
    fi
    git_ reset --hard --quiet "$OLD" && [ -z "$(git_ status --porcelain --untracked-files=no)" ]
}

# --- forward, rollback, recovery --------------------------------------------------------------

run_step() {  # run_step NAME: one step of the way forward
    case "$1" in
        fast-forward) fast_forward ;;
        install) step "install requirements" install_if_changed ;;
        model) step "embedded model (setup-model: re-derives only what this version changed)" prepare_model ;;
        self-test) step "self-test" run_selftest ;;
        restart) step "restart" restart_app ;;
        health) step "health" check_health "$NEW" ;;
    esac
}

fast_forward() {
    if step "fast-forward to $NEW" git_ merge --ff-only --quiet --no-progress "$NEW"; then
        return 0
    fi
    [ "$(git_ rev-parse HEAD)" = "$OLD" ] || return 1  # moved: the ordinary rollback
    # Stopped midway without moving HEAD (a full disk, an untracked file in the way): put it back here.
    if ! step "restore the files of $OLD" restore_checkout; then
        log "ROLLBACK FAILED: the checkout may hold part of $NEW; once the cause above is fixed" \
            "(a full disk?), run 'git reset --hard $OLD' in $APP_DIR; a person must look"
        exit 7
    fi
    log "fast-forward failed (an untracked file in the way, or a full disk?); $OLD is in place"
    txn_close rolled_back fast-forward "the fast-forward failed"
    exit 1
}

# apply_update FIRST_STEP: the way forward from FIRST_STEP; exits 0 (updated) or through rollback.
apply_update() {
    local name started=no
    for name in "${FORWARD_STEPS[@]}"; do
        [ "$name" = "$1" ] && started=yes
        [ "$started" = yes ] || continue
        txn_write forward "$name"
        hook "$name"
        run_step "$name" || rollback "$name"
    done
    txn_write forward done
    hook done
    mark_verified "$NEW" "self-test passed, answered /health after its restart"
    txn_close updated
    log "updated: $NEW is running (was $OLD)"
    exit 0
}

rollback() {  # rollback FAILED_STEP [REASON]
    local failed="$1" reason="${2:-step $1 failed}"
    txn_write rollback reset "" "$failed"
    log "ROLLBACK: returning to $OLD (update to $NEW failed at: $failed)"
    hook rollback
    if ! step "reset to $OLD" restore_checkout; then
        log "ROLLBACK FAILED: could not reset to $OLD; a person must look"
        exit 7
    fi
    if [ "$REINSTALL" = yes ]; then
        step "reinstall old requirements" install_requirements \
            || { log "ROLLBACK FAILED: reinstalling the old requirements failed"; exit 7; }
    fi
    # best effort: the old version runs on newer derived files too, only slower (it warns)
    step "embedded model for the old version" prepare_model || log "the old version's setup-model failed; it runs its plain graph"
    if [[ "$BEFORE_RESTART" == *" $failed "* ]] && step "is $OLD still serving" app_runs "$OLD"; then
        log "the running app ($OLD) was never stopped and answers; left alone"
    elif ! step "restart old version" restart_app || ! step "health of old version" check_health "$OLD"; then
        log "ROLLBACK FAILED: the old version $OLD does not come back up; a person must look"
        exit 7
    fi
    txn_close rolled_back "$failed" "$reason"
    log "rolled back: $OLD is running again"
    exit 1
}

# A run found the transaction of one that was killed: finish it or roll it back.
recover() {
    RECOVERING=yes
    OLD="$(state_get "$TXN" old)"
    NEW="$(state_get "$TXN" new)"
    REINSTALL="$(state_get "$TXN" reinstall)"
    local phase step attempt failed head
    phase="$(state_get "$TXN" phase)"
    step="$(state_get "$TXN" step)"
    attempt="$(state_get "$TXN" attempt)"
    failed="$(state_get "$TXN" failed)"
    if [ -z "$OLD" ] || [ -z "$NEW" ]; then
        log "RECOVERY FAILED: $TXN is unreadable; a person must look"
        exit 7
    fi
    local doing="on its way forward"
    [ "$phase" = rollback ] && doing="while rolling back"
    log "INTERRUPTED: the update $OLD -> $NEW (started $(state_get "$TXN" started), attempt ${attempt:-1})" \
        "was cut off during '$step' $doing"
    head="$(git_ rev-parse --verify HEAD 2>/dev/null)"
    if [ "$phase" = rollback ]; then
        log "finishing its rollback"
        rollback "$failed" "interrupted while rolling back from $failed"
    fi
    if [ "$step" = done ]; then
        mark_verified "$NEW" "self-test passed, answered /health after its restart"
        txn_close updated
        log "updated: $NEW is running (was $OLD); only the record was missing"
        return 0
    fi
    attempt=$(( ${attempt:-1} + 1 ))
    if [ "$attempt" -gt "$MAX_ATTEMPTS" ]; then
        log "$NEW was interrupted $MAX_ATTEMPTS times; rolling it back, not to be tried again until" \
            "$REMOTE/$BRANCH moves on"
        rollback "$step" "interrupted"
    fi
    if [ "$head" = "$OLD" ]; then
        log "HEAD is still $OLD: the fast-forward did not finish; putting $OLD's files back and redoing it"
        txn_write forward fast-forward "$attempt"
        step "restore the files of $OLD" restore_checkout || rollback fast-forward "could not restore $OLD"
        apply_update fast-forward
    elif [ "$head" = "$NEW" ]; then
        [ "$step" = fast-forward ] && step=install  # it finished; the next step had not begun
        if [ -n "$(git_ status --porcelain --untracked-files=no)" ]; then
            step "put back the files of $NEW" git_ reset --hard --quiet "$NEW" || rollback "$step"
        fi
        log "finishing it from step '$step' (attempt $attempt of $MAX_ATTEMPTS)"
        txn_write forward "$step" "$attempt"
        apply_update "$step"
    else
        log "the checkout is at ${head:-?}, neither of them; rolling back"
        rollback "$step" "the checkout was moved"
    fi
}

rotate_log() {
    local size
    size="$(stat -c %s "$LOG" 2>/dev/null || echo 0)"
    [ "$size" -gt "$LOG_MAX_BYTES" ] && mv -f "$LOG" "$LOG.1"
    return 0
}

main() {
    case "${1:-}" in
        --keepalive) KEEPALIVE=yes ;;
        "") ;;
        *) echo "usage: $0 [--keepalive]" >&2; exit 64 ;;
    esac
    mkdir -p "$(dirname "$LOG")" "$(dirname "$LOCK")" "$STATE_DIR" \
        || { echo "update: cannot create log or state dir" >&2; exit 7; }
    rotate_log
    exec 9>>"$LOCK"
    if ! flock -n 9; then
        [ "$KEEPALIVE" = yes ] && exit 0  # the update that holds it keeps the app running
        log "another update is running (lock $LOCK is held); nothing done"
        exit 2
    fi
    OWNER="$(stat -c %U "$APP_DIR")"
    [ "$KEEPALIVE" = yes ] || log "update of $APP_DIR from $REMOTE/$BRANCH (as $(id -un), checkout owned by $OWNER)"

    clear_stale_git_locks
    [ -f "$TXN" ] && recover
    if ! ensure_running && [ "$KEEPALIVE" = yes ]; then
        exit 7
    fi
    [ "$KEEPALIVE" = yes ] && exit 0

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

    hook fetch
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
    if [ "$(state_get "$LAST" to)" = "$NEW" ] && [ "$(state_get "$LAST" reason)" = interrupted ]; then
        log "not trying $NEW again: it was rolled back after $MAX_ATTEMPTS interrupted attempts" \
            "(see above in this log); waiting for a newer commit on $REMOTE/$BRANCH"
        exit 1
    fi
    log "updating $OLD -> $NEW ($(git_ rev-list --count "$OLD..$NEW") commit(s))"

    # Open the transaction: the files the fast-forward may write that the checkout lacks (all a
    # recovery may remove), then the record itself; the commit that has been serving counts as
    # verified when no update has verified one yet.
    requirements_changed "$OLD" "$NEW" && REINSTALL=yes
    local path
    git_ diff -z --name-only --no-renames --diff-filter=A "$OLD" "$NEW" \
        | while IFS= read -r -d '' path; do
            [ -e "$APP_DIR/$path" ] || [ -L "$APP_DIR/$path" ] || printf '%s\0' "$path"
        done | state_write "$ADDED" || { log "cannot write $ADDED (disk full?); nothing changed"; exit 7; }
    [ -f "$VERIFIED" ] || mark_verified "$OLD" "was serving when updates began"
    txn_write forward fast-forward 1 || { log "nothing changed; a person must look"; exit 7; }
    apply_update fast-forward
}

# Everything runs from inside main, which bash has fully read before the fast-forward replaces this file.
main "$@"
