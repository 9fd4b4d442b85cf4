# phasewatch: install the daemon and its systemd integration (as root).
#
#   make deb                     dist/phasewatch_<version>_all.deb for Debian 12 (Debian's tools and
#                                python3-* packages; installs its build dependencies with apt)
#   make install                 venv + files + sysusers/tmpfiles/catalog/daemon-reload (a live system)
#   make install-files DESTDIR="$PWD/stage"   the files only, into a staging root
#   make install-data DESTDIR=... everything but the program, the polkit rule and the config
#                                (what debian/rules adds to pybuild's install)
#   make uninstall               remove what install-files put in place (not config nor state)
#   make bench                   the performance bench (docs/performance.md; as root, a throwaway systemd)
#
# PREFIX decides where units, sysusers.d, tmpfiles.d, the catalog and the `phasewatch` link go; all of
# $(PREFIX)/lib/systemd/system, $(PREFIX)/lib/sysusers.d, $(PREFIX)/lib/tmpfiles.d and
# $(PREFIX)/lib/systemd/catalog are searched by systemd for PREFIX=/usr/local and PREFIX=/usr. The
# polkit rule and the config are host settings and go under SYSCONFDIR (/etc); both are the
# operator's to edit, so an existing one is never overwritten.
# Then: phasewatch init sglang-kimi (or edit $(SYSCONFDIR)/phasewatch/sglang-kimi.yaml), and
#   systemctl enable --now phasewatch@sglang-kimi.service   (see docs/operations.md)

PREFIX ?= /usr/local
COMPLETIONSDIR ?= $(PREFIX)/share/bash-completion/completions
SYSCONFDIR ?= /etc
DESTDIR ?=
BINDIR ?= $(PREFIX)/bin
UNITDIR ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
TMPFILESDIR ?= $(PREFIX)/lib/tmpfiles.d
CATALOGDIR ?= $(PREFIX)/lib/systemd/catalog
DOCDIR ?= $(PREFIX)/share/doc/phasewatch
MANDIR ?= $(PREFIX)/share/man
# Where the Prometheus alerts' runbook_url points (absolute): the runbook as installed here, or
# your own copy of it, e.g. make install RUNBOOK_BASE=https://wiki.example/phasewatch/runbook.md
RUNBOOK_BASE ?= file://$(DOCDIR)/runbook.md
# Templates the operator copies and adapts: the polkit rule, Prometheus rules, dashboards.
DATADIR ?= $(PREFIX)/share/phasewatch
POLKITDIR ?= $(SYSCONFDIR)/polkit-1/rules.d
CONFDIR ?= $(SYSCONFDIR)/phasewatch
VENV ?= /opt/phasewatch/venv
PYTHON ?= /usr/bin/python3
# The instance (the watched unit without .service) whose example config is installed, only if no
# config exists yet under either name (sglang-kimi.yaml, or the older sglang-kimi.service.yaml).
WATCHED ?= sglang-kimi

INSTALL ?= install
# The example config's last line in /etc (stages/s4_judge/init_config.py's EXAMPLE_SEAL_PREFIX): `phasewatch
# init` replaces the file while this still matches, as it replaces a file it wrote itself.
EXAMPLE_SEAL := \# phasewatch's example config, installed unedited; edited once this stops matching: sha256 

VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' pyproject.toml)
DEB := dist/phasewatch_$(VERSION)_all.deb
# debian/control's Build-Depends, and dpkg-dev for dpkg-buildpackage.
DEB_BUILD_DEPS := dpkg-dev debhelper dh-python pybuild-plugin-pyproject python3-all python3-setuptools \
	python3-pytest python3-hypothesis python3-systemd python3-pystemd python3-httpx \
	python3-prometheus-client python3-yaml

.PHONY: install install-venv install-files install-data uninstall deb deb-deps bench man

# The man pages, from the parser, the config's keys and the unit (phasewatch/output/manpages.py); committed,
# and a test checks that they equal what this writes.
man:
	PYTHONPATH=daemon $(PYTHON) -m phasewatch.output.manpages man

install: install-venv install-files
	systemd-sysusers $(SYSUSERSDIR)/phasewatch.conf
	systemd-tmpfiles --create $(TMPFILESDIR)/phasewatch.conf
	journalctl --update-catalog
	systemctl daemon-reload
	@echo "next: list the watched units in $(POLKITDIR)/50-phasewatch.rules, edit $(CONFDIR)/$(WATCHED).yaml (or: phasewatch init $(WATCHED)),"
	@echo "      then systemctl enable --now phasewatch@$(WATCHED).service"
	@echo "the server's unit keeps every start-up line with LogRateLimitBurst= (docs/operations.md)"

# A venv is not relocatable (its scripts name their interpreter's absolute path), so it is made in
# place, never under DESTDIR. Building systemd-python and pystemd needs libsystemd-dev, pkg-config,
# gcc and python3-dev; the venv must be readable by the phasewatch user (not in a private home).
install-venv:
	@if [ -n "$(DESTDIR)" ]; then echo "install-venv: not with DESTDIR (a venv is not relocatable)" >&2; exit 1; fi
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --upgrade .

# The polkit rule and the config are the operator's: installed once, never replaced (a changed
# template is announced, not applied).
install-files: install-data
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(POLKITDIR) $(DESTDIR)$(CONFDIR)
	ln -sfn $(VENV)/bin/phasewatch $(DESTDIR)$(BINDIR)/phasewatch
	@if [ ! -e $(DESTDIR)$(POLKITDIR)/50-phasewatch.rules ]; then \
		echo "$(INSTALL) -m 0644 units/polkit/50-phasewatch.rules $(DESTDIR)$(POLKITDIR)/50-phasewatch.rules"; \
		$(INSTALL) -m 0644 units/polkit/50-phasewatch.rules $(DESTDIR)$(POLKITDIR)/50-phasewatch.rules; \
	elif ! cmp -s units/polkit/50-phasewatch.rules $(DESTDIR)$(POLKITDIR)/50-phasewatch.rules; then \
		echo "kept $(DESTDIR)$(POLKITDIR)/50-phasewatch.rules (yours); the shipped one is $(DATADIR)/polkit/50-phasewatch.rules"; \
	fi
	test -e $(DESTDIR)$(CONFDIR)/$(WATCHED).yaml || test -e $(DESTDIR)$(CONFDIR)/$(WATCHED).service.yaml || { \
		{ cat config/phasewatch.yaml; printf '%s%s\n' "$(EXAMPLE_SEAL)" "$$(sha256sum < config/phasewatch.yaml | cut -c1-16)"; } \
			> $(DESTDIR)$(CONFDIR)/$(WATCHED).yaml && chmod 0644 $(DESTDIR)$(CONFDIR)/$(WATCHED).yaml; }

# Everything but the program, the live polkit rule and the config. The daemon's unit names
# $(BINDIR)/phasewatch; a dashboard directory (config/grafana) is shipped whole if there is one.
install-data:
	$(INSTALL) -d $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSUSERSDIR) $(DESTDIR)$(TMPFILESDIR) $(DESTDIR)$(CATALOGDIR) \
		$(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(DATADIR)/polkit $(DESTDIR)$(DATADIR)/prometheus
	sed 's|/usr/local/bin/phasewatch|$(BINDIR)/phasewatch|g; s|/etc/phasewatch/|$(CONFDIR)/|g' \
		units/phasewatch@.service > $(DESTDIR)$(UNITDIR)/phasewatch@.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/phasewatch@.service
	$(INSTALL) -m 0644 units/phasewatch-receiver@.socket $(DESTDIR)$(UNITDIR)/phasewatch-receiver@.socket
	$(INSTALL) -m 0644 units/sysusers.d/phasewatch.conf $(DESTDIR)$(SYSUSERSDIR)/phasewatch.conf
	$(INSTALL) -m 0644 units/tmpfiles.d/phasewatch.conf $(DESTDIR)$(TMPFILESDIR)/phasewatch.conf
	$(INSTALL) -m 0644 units/phasewatch.catalog $(DESTDIR)$(CATALOGDIR)/phasewatch.catalog
	$(INSTALL) -m 0644 units/polkit/50-phasewatch.rules $(DESTDIR)$(DATADIR)/polkit/50-phasewatch.rules
	$(INSTALL) -d $(DESTDIR)$(COMPLETIONSDIR)
	$(INSTALL) -m 0644 completions/phasewatch $(DESTDIR)$(COMPLETIONSDIR)/phasewatch
	for rules in config/prometheus/*.yml; do \
		sed 's|runbook_url: docs/runbook.md#|runbook_url: $(RUNBOOK_BASE)#|' "$$rules" > $(DESTDIR)$(DATADIR)/prometheus/$$(basename "$$rules"); \
	done
	chmod 0644 $(DESTDIR)$(DATADIR)/prometheus/*.yml
	$(INSTALL) -d $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man8
	$(INSTALL) -m 0644 man/phasewatch.1 $(DESTDIR)$(MANDIR)/man1/
	$(INSTALL) -m 0644 man/phasewatch.yaml.5 $(DESTDIR)$(MANDIR)/man5/
	$(INSTALL) -m 0644 man/phasewatch@.service.8 $(DESTDIR)$(MANDIR)/man8/
	$(INSTALL) -d $(DESTDIR)$(DATADIR)/alertmanager
	$(INSTALL) -m 0644 config/alertmanager/*.yml $(DESTDIR)$(DATADIR)/alertmanager/
	if [ -d config/grafana ]; then \
		$(INSTALL) -d $(DESTDIR)$(DATADIR)/grafana && cp -R config/grafana/. $(DESTDIR)$(DATADIR)/grafana/ && \
		chmod -R u=rwX,go=rX $(DESTDIR)$(DATADIR)/grafana; \
	fi
	sed 's|/usr/local/bin/phasewatch|$(BINDIR)/phasewatch|g' units/sglang-kimi.service \
		> $(DESTDIR)$(DOCDIR)/examples/sglang-kimi.service
	sed 's|/usr/local/bin/phasewatch|$(BINDIR)/phasewatch|g' units/sglang-kimi-ready.service \
		> $(DESTDIR)$(DOCDIR)/examples/sglang-kimi-ready.service
	$(INSTALL) -m 0644 units/sglang-log-rate.conf units/phasewatch-remote-scrape.conf config/phasewatch.yaml \
		$(DESTDIR)$(DOCDIR)/examples/
	chmod 0644 $(DESTDIR)$(DOCDIR)/examples/*
	cp -R docs/. $(DESTDIR)$(DOCDIR)/
	chmod -R u=rwX,go=rX $(DESTDIR)$(DOCDIR)

# Not the config, the state nor the user. The journald drop-in that versions before 0.1.0's
# package installed host-wide (RateLimitBurst=0) is removed too, if it is still there.
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/phasewatch $(DESTDIR)$(UNITDIR)/phasewatch@.service \
		$(DESTDIR)$(SYSUSERSDIR)/phasewatch.conf $(DESTDIR)$(TMPFILESDIR)/phasewatch.conf \
		$(DESTDIR)$(CATALOGDIR)/phasewatch.catalog $(DESTDIR)$(POLKITDIR)/50-phasewatch.rules \
		$(DESTDIR)$(COMPLETIONSDIR)/phasewatch $(DESTDIR)$(MANDIR)/man1/phasewatch.1 \
		$(DESTDIR)$(MANDIR)/man5/phasewatch.yaml.5 $(DESTDIR)$(MANDIR)/man8/phasewatch@.service.8 \
		$(DESTDIR)$(SYSCONFDIR)/systemd/journald.conf.d/50-phasewatch.conf
	rm -rf $(DESTDIR)$(DOCDIR) $(DESTDIR)$(DATADIR)

# The Debian package, built with dpkg-buildpackage from a copy of the checkout's files (tracked and
# new, not ignored: no venv, caches nor earlier builds) in build/deb, then copied to dist/. With
# Debian's own python3 and tools only: whatever python3 comes first in PATH (a venv, pyenv) is not it.
deb: deb-deps
	@changelog="$$(sed -n '1s/^phasewatch (\([^)]*\)).*/\1/p' debian/changelog)"; \
	if [ "$$changelog" != "$(VERSION)" ]; then \
		echo "deb: debian/changelog says $$changelog, pyproject.toml says $(VERSION): add a changelog entry" >&2; exit 1; \
	fi
	rm -rf build/deb
	mkdir -p build/deb/phasewatch-$(VERSION) dist
	if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then \
		git ls-files --cached --others --exclude-standard | while IFS= read -r f; do [ -e "$$f" ] && printf '%s\n' "$$f"; done \
			| tar -cf - -T - | tar -xf - -C build/deb/phasewatch-$(VERSION); \
	else \
		tar -cf - --exclude=./.venv --exclude=./build --exclude=./dist --exclude=__pycache__ --exclude='*.egg-info' . \
			| tar -xf - -C build/deb/phasewatch-$(VERSION); \
	fi
	cd build/deb/phasewatch-$(VERSION) && \
		env -u PYTHONPATH -u PYTHONHOME -u VIRTUAL_ENV PATH=/usr/sbin:/usr/bin:/sbin:/bin dpkg-buildpackage -b -us -uc
	cp build/deb/phasewatch_$(VERSION)_all.deb $(DEB)
	@echo "built $(DEB)"

deb-deps:
	@missing=""; for p in $(DEB_BUILD_DEPS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" != 0 ]; then echo "deb: missing build dependencies; as root: apt-get install$$missing" >&2; exit 1; fi; \
		echo "apt-get install$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# The performance bench (docs/performance.md), as root, in a throwaway systemd: installs fail2ban and
# strace (apt) and py-spy (.venv), writes bench/results.json and docs/performance.md (~15 min, 2 cores).
bench:
	bash scripts/bench.sh
