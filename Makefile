# phasewatch: install the daemon and its systemd integration (as root).
#
#   make install                 venv + files + sysusers/catalog/daemon-reload (a live system)
#   make install-files DESTDIR="$PWD/stage"   the files only, into a staging root (packaging)
#   make uninstall               remove what install-files put in place (not config nor state)
#   make bench                   the performance bench (docs/performance.md; as root, a throwaway systemd)
#
# PREFIX decides where units, sysusers.d, the catalog and the `phasewatch` link go; all of
# $(PREFIX)/lib/systemd/system, $(PREFIX)/lib/sysusers.d and $(PREFIX)/lib/systemd/catalog are
# searched by systemd for PREFIX=/usr/local and PREFIX=/usr. The polkit rule, the journald drop-in
# and the config are host settings and go under SYSCONFDIR (/etc).
# Then: edit $(SYSCONFDIR)/phasewatch/sglang-kimi.service.yaml, and
#   systemctl enable --now phasewatch@sglang-kimi.service.service   (see docs/operations.md)

PREFIX ?= /usr/local
SYSCONFDIR ?= /etc
DESTDIR ?=
BINDIR ?= $(PREFIX)/bin
UNITDIR ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
CATALOGDIR ?= $(PREFIX)/lib/systemd/catalog
DOCDIR ?= $(PREFIX)/share/doc/phasewatch
POLKITDIR ?= $(SYSCONFDIR)/polkit-1/rules.d
JOURNALDDIR ?= $(SYSCONFDIR)/systemd/journald.conf.d
CONFDIR ?= $(SYSCONFDIR)/phasewatch
VENV ?= /opt/phasewatch/venv
PYTHON ?= /usr/bin/python3
# The watched unit whose example config is installed (only if that file does not exist yet).
WATCHED ?= sglang-kimi.service

INSTALL ?= install

.PHONY: install install-venv install-files uninstall bench

install: install-venv install-files
	systemd-sysusers $(SYSUSERSDIR)/phasewatch.conf
	journalctl --update-catalog
	systemctl daemon-reload
	@echo "journald drop-in installed: 'systemctl restart systemd-journald' applies RateLimitBurst=0"
	@echo "next: edit $(CONFDIR)/$(WATCHED).yaml, then systemctl enable --now phasewatch@$(WATCHED).service"

# A venv is not relocatable (its scripts name their interpreter's absolute path), so it is made in
# place, never under DESTDIR. Building systemd-python and pystemd needs libsystemd-dev, pkg-config,
# gcc and python3-dev; the venv must be readable by the phasewatch user (not in a private home).
install-venv:
	@if [ -n "$(DESTDIR)" ]; then echo "install-venv: not with DESTDIR (a venv is not relocatable)" >&2; exit 1; fi
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --upgrade .

install-files:
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSUSERSDIR) $(DESTDIR)$(CATALOGDIR) \
		$(DESTDIR)$(POLKITDIR) $(DESTDIR)$(JOURNALDDIR) $(DESTDIR)$(CONFDIR) $(DESTDIR)$(DOCDIR)/examples
	ln -sfn $(VENV)/bin/phasewatch $(DESTDIR)$(BINDIR)/phasewatch
	sed 's|/usr/local/bin/phasewatch|$(BINDIR)/phasewatch|g; s|/etc/phasewatch/|$(CONFDIR)/|g' \
		units/phasewatch@.service > $(DESTDIR)$(UNITDIR)/phasewatch@.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/phasewatch@.service
	$(INSTALL) -m 0644 units/sysusers.d/phasewatch.conf $(DESTDIR)$(SYSUSERSDIR)/phasewatch.conf
	$(INSTALL) -m 0644 units/phasewatch.catalog $(DESTDIR)$(CATALOGDIR)/phasewatch.catalog
	$(INSTALL) -m 0644 units/polkit/50-phasewatch.rules $(DESTDIR)$(POLKITDIR)/50-phasewatch.rules
	$(INSTALL) -m 0644 units/journald.conf.d/50-phasewatch.conf $(DESTDIR)$(JOURNALDDIR)/50-phasewatch.conf
	test -e $(DESTDIR)$(CONFDIR)/$(WATCHED).yaml || \
		$(INSTALL) -m 0644 config/phasewatch.yaml $(DESTDIR)$(CONFDIR)/$(WATCHED).yaml
	$(INSTALL) -m 0644 units/sglang-kimi.service units/sglang-kimi-ready.service $(DESTDIR)$(DOCDIR)/examples/
	$(INSTALL) -m 0644 docs/operations.md $(DESTDIR)$(DOCDIR)/operations.md

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/phasewatch $(DESTDIR)$(UNITDIR)/phasewatch@.service \
		$(DESTDIR)$(SYSUSERSDIR)/phasewatch.conf $(DESTDIR)$(CATALOGDIR)/phasewatch.catalog \
		$(DESTDIR)$(POLKITDIR)/50-phasewatch.rules $(DESTDIR)$(JOURNALDDIR)/50-phasewatch.conf
	rm -rf $(DESTDIR)$(DOCDIR)

# The performance bench (docs/performance.md), as root, in a throwaway systemd: installs fail2ban and
# strace (apt) and py-spy (.venv), writes bench/results.json and docs/performance.md (~15 min, 2 cores).
bench:
	bash scripts/bench.sh
