# Sourced by scripts/start-libvirtd and scripts/test-host2: how vmbench's scripts start a
# libvirtd daemon, in one place.
#
# Where systemd is not PID 1, libvirtd runs under `tini -s` (a child subreaper). libvirtd
# double-forks QEMU, so a domain's QEMU is an orphan: on this kind of machine PID 1 reaps orphans
# only every second or two, and virDomainDestroy (and libvirt's own stop after a guest powers
# off) waits for the zombie to go: 1.6-2.0 s per domain, measured (teardown of a 4 s local cell:
# 1.6-2.0 s under PID 1, 0.22 s under tini). Under tini the orphan is tini's and is reaped at once.

# Closes every descriptor of the calling shell beyond stdio: a daemon started after it must hold
# none of the caller's (a test run's flock, CI's log pipe), or it keeps them open for as long as
# it lives. (255 is bash's own close-on-exec descriptor for the script.)
close_fds() {
    local fd
    for fd in /proc/$BASHPID/fd/*; do
        fd=${fd##*/}
        if [ "$fd" -gt 2 ] && [ "$fd" -ne 255 ]; then
            exec {fd}>&-
        fi
    done
}

# Where this machine's libvirtd (started here, under tini) logs: libvirt's own warnings and
# errors, and (in LIBVIRTD_LOG.stderr) its and tini's standard error.
LIBVIRTD_LOG=/var/log/libvirt/vmbench-libvirtd.log

# libvirtd_daemon [PREFIX...] -- [LIBVIRTD-ARG...]: starts libvirtd as a daemon with the given
# arguments; PREFIX is a command that runs it elsewhere (host2's `in_ns`), or nothing.
libvirtd_daemon() {
    local prefix=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do
        prefix+=("$1")
        shift
    done
    if [ $# -gt 0 ]; then shift; fi
    if [ -d /run/systemd/system ] || ! command -v tini >/dev/null; then
        "${prefix[@]}" libvirtd -d "$@"
    else
        (
            close_fds
            # exec: no shell left waiting beside the daemon; PREFIX may be a shell function,
            # which exec cannot run.
            # This machine's daemon keeps its warnings and errors, and whatever tini says when it
            # dies, in LIBVIRTD_LOG*: scripts/test prints their tails if it is gone after a run.
            if [ ${#prefix[@]} -eq 0 ]; then
                LIBVIRT_LOG_OUTPUTS="3:file:$LIBVIRTD_LOG" \
                    exec setsid tini -s -- libvirtd "$@" </dev/null >/dev/null 2>>"$LIBVIRTD_LOG.stderr"
            fi
            "${prefix[@]}" setsid tini -s -- libvirtd "$@" </dev/null >/dev/null 2>&1
        ) &
    fi
}
