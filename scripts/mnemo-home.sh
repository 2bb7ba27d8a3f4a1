#!/usr/bin/env bash
# Prints the directory for the local cluster and the server-side Python modules:
# .mnemo/ in the project, unless the server's user could not reach it (as root the
# server runs as 'postgres', which needs o+x on every parent directory, e.g. not
# under /root); then a directory of its own under /var/tmp named after the path.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
reachable=yes
if [ "$(id -u)" = 0 ]; then
  d=$top
  while [ "$d" != / ]; do
    case "$(stat -c %A "$d")" in ?????????x|?????????t) ;; *) reachable=no ;; esac
    d=$(dirname "$d")
  done
fi
if [ $reachable = yes ]; then
  echo "$top/.mnemo"
else
  echo "/var/tmp/mnemo-$(printf '%s' "$top" | sha256sum | cut -c1-12)"
fi
