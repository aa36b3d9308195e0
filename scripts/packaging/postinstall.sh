#!/bin/sh
# consullock .deb/.rpm: make systemd read the new units. Nothing is enabled
# or started: the operator writes /etc/consullock/*.env first.
set -e
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null 2>&1 || true
fi
