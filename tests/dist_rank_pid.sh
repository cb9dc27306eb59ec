# Sourced by the distributed tests (train_dist_kill.sh, train_dist_hang.sh):
# rank_pid LAUNCHER RANK prints the pid of the launcher's child process that
# Open MPI made rank RANK (its environment says so), nothing if none.
rank_pid() {
    for env in /proc/[0-9]*/environ; do
        dir=${env%/environ}
        parent=$(awk '/^PPid:/ { print $2 }' "$dir/status" 2>/dev/null) || continue
        [ "$parent" = "$1" ] && tr '\0' '\n' < "$env" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" &&
            echo "${dir#/proc/}"
    done
    return 0
}
