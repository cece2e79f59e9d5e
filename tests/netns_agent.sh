#!/bin/sh
# Stands in for ssh in the two-host test: mpiexec's "run COMMAND on HOST" becomes "run it in network namespace
# $JHVD_NETNS_PREFIX$HOST, with hostname HOST and a clean environment", as a fresh ssh login would give it.
# Like an ssh client, this process stays on the launching host, with mpiexec's environment, while the command runs
# "over there"; killing it does not reach the other side, as with a host that stopped answering.
while [ "${1#-}" != "$1" ]; do shift; done
host=$1
shift
ip netns exec "${JHVD_NETNS_PREFIX}${host}" unshare --uts \
    env -i HOME="${HOME:-/root}" PATH="${JHVD_REMOTE_PATH:-/usr/bin:/bin}" \
    /bin/sh -c 'hostname "$0" && exec /bin/sh -c "$1"' "$host" "$*" &
wait $!
