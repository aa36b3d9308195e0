#!/bin/sh
# consullock .deb/.rpm: before the files are unpacked, the system users the
# units run as: consullock (consullock-controller.service) and
# consullock-jobs (consullock-run@.service). Kept on removal.
set -e
nologin=/usr/sbin/nologin
[ -x "$nologin" ] || nologin=/sbin/nologin
for name in consullock consullock-jobs; do
  if ! getent group "$name" >/dev/null; then
    groupadd --system "$name"
  fi
  if ! getent passwd "$name" >/dev/null; then
    useradd --system --gid "$name" --home-dir /nonexistent --no-create-home \
      --shell "$nologin" --comment "consullock ($name)" "$name"
  fi
done
