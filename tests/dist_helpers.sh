# Sourced by the distributed tests (train_dist_kill.sh, train_dist_hang.sh).

# rank_pid LAUNCHER RANK: the pid of the launcher's child process that Open
# MPI made rank RANK (its environment says so), nothing if none.
rank_pid() {
    for env in /proc/[0-9]*/environ; do
        dir=${env%/environ}
        parent=$(awk '/^PPid:/ { print $2 }' "$dir/status" 2>/dev/null) || continue
        [ "$parent" = "$1" ] && tr '\0' '\n' < "$env" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" &&
            echo "${dir#/proc/}"
    done
    return 0
}

# wait_for_file FILE TENTHS: 0 once FILE exists, 1 if it does not within
# TENTHS tenths of a second.
wait_for_file() {
    tries=0
    until [ -f "$1" ]; do
        tries=$((tries + 1))
        [ $tries -lt "$2" ] || return 1
        sleep 0.1
    done
}

# wait_gone PID TENTHS: waits up to TENTHS tenths of a second for PID to
# end; sets waited to the tenths it took; 1 if it is still running.
wait_gone() {
    waited=0
    while kill -0 "$1" 2>/dev/null && [ $waited -lt "$2" ]; do
        sleep 0.1
        waited=$((waited + 1))
    done
    ! kill -0 "$1" 2>/dev/null
}
