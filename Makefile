# The two commands a newcomer needs: `make demo` and `make test`. Both install what they need.
CARGO ?= cargo
WASM_TARGET := wasm32-wasip2
# Where cargo builds: CARGO_TARGET_DIR when set, as cargo itself does.
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
WASM_DIR := $(TARGET_DIR)/$(WASM_TARGET)/wasm
EXAMPLE_HOOKS := zone_spread maintenance_window error_budget
WASM_PACKAGES := -p zone-spread -p maintenance-window -p error-budget -p site-policy -p drain-tiers -p slo-gate -p stage-gate -p hostile-hook -p wrong-version-hook
DEMO_DIR := examples-hooks/demo

.PHONY: demo test wasm wasm-target control-plane prometheus registry browser pictures docs lint release release-check python-hook js-hook bench

## demo: a dry-run plan of the bundled snapshot with the three example hooks active.
## The build prints cargo's progress (minutes on a fresh machine); the plan is all that follows.
demo: wasm
	$(CARGO) build -p rollout-ext --bin kubectl-rollout_ext
	@echo "--- dry-run plan of $(DEMO_DIR)/snapshot.json with the example hooks ---"
	@$(TARGET_DIR)/debug/kubectl-rollout_ext nodes \
	  --from-snapshot $(DEMO_DIR)/snapshot.json --policy $(DEMO_DIR)/policy.yaml \
	  --kubelet-version v1.20.2 --now 2026-11-27T12:00:00Z -o wide

## test: every test, against real compiled hooks and a real control plane. The test binaries run
## TEST_JOBS (default 3) at a time: each mostly waits on its own control plane.
test: wasm python-hook js-hook control-plane prometheus registry browser release-check
	$(CARGO) build --bins
	$(TARGET_DIR)/debug/test-all

## bench: the figures of BENCHMARKS.md, each beside its peer (release build, a real test cluster,
## kubectl on PATH; about twenty minutes). Not part of `test`: speed is reported, never asserted.
## BENCH_ARGS="--runs 3 --only plan,hooks" narrows it.
bench: wasm control-plane
	$(CARGO) build --release -p rollout-ext -p rollout-ext-e2e -p zone-spread
	$(TARGET_DIR)/release/bench $(BENCH_ARGS)

## lint: formatting and clippy, as CI checks them.
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

wasm-target:
	@rustup target list --installed | grep -qx $(WASM_TARGET) || rustup target add $(WASM_TARGET)

## wasm: the example hooks and the test hooks, as components; the examples are copied beside the demo policy.
wasm: wasm-target
	$(CARGO) build --profile wasm --target $(WASM_TARGET) $(WASM_PACKAGES)
	@mkdir -p $(DEMO_DIR)/hooks
	@for h in $(EXAMPLE_HOOKS); do cp $(WASM_DIR)/$$h.wasm $(DEMO_DIR)/hooks/; done

## python-hook: the Python example hooks (componentize-py, installed once into a cached venv).
python-hook: $(WASM_DIR)/oldest_first_py.wasm $(WASM_DIR)/site_policy_py.wasm
$(WASM_DIR)/oldest_first_py.wasm: examples-hooks/oldest-first-py/app.py hooks-sdk/python/rollout_ext_hooks.py hooks-sdk/python/build.sh hooks-sdk/wit/policy.wit
	bash examples-hooks/oldest-first-py/build.sh $@
$(WASM_DIR)/site_policy_py.wasm: examples-hooks/site-policy-py/app.py hooks-sdk/python/rollout_ext_hooks.py hooks-sdk/python/build.sh hooks-sdk/wit/policy.wit
	bash hooks-sdk/python/build.sh examples-hooks/site-policy-py/app.py $@

## js-hook: the JavaScript example hooks (componentize-js, installed once with npm into a cache).
js-hook: $(WASM_DIR)/fewest_pods_js.wasm $(WASM_DIR)/site_policy_js.wasm
$(WASM_DIR)/fewest_pods_js.wasm: examples-hooks/fewest-pods-js/app.js hooks-sdk/js/build.sh hooks-sdk/wit/policy.wit
	bash examples-hooks/fewest-pods-js/build.sh $@
$(WASM_DIR)/site_policy_js.wasm: examples-hooks/site-policy-js/app.js hooks-sdk/js/rollout_ext_hooks.js hooks-sdk/js/build.sh hooks-sdk/wit/policy.wit
	bash hooks-sdk/js/build.sh examples-hooks/site-policy-js/app.js $@

## prometheus: install (once) and cache the Prometheus server the metrics-gate tests scrape with.
prometheus:
	bash tests/cluster/install-server.sh prometheus 2.42.0 9090

## registry: install (once) and cache the OCI registry the hook-module tests push to and pull from.
registry:
	bash tests/cluster/install-server.sh docker-registry 2.8.2 5000

## browser: install (once) Debian's headless Chromium, in which the tests open the plan's pages.
browser:
	bash tests/cluster/install-browser.sh

## pictures: the screenshots docs/ shows, taken by the tests that open the plan's pages and
## the one that follows a rotation with status --watch (on the test cluster).
pictures: wasm browser control-plane
	$(CARGO) build -p rollout-ext --bin kubectl-rollout_ext
	ROLLOUT_EXT_PICTURES=$(CURDIR)/docs/pictures $(CARGO) test -p rollout-ext-e2e --test cli_plan draws
	ROLLOUT_EXT_PICTURES=$(CURDIR)/docs/pictures $(CARGO) test -p rollout-ext-e2e --test status_watch blocked_drain

## docs: docs/commands.md again from every command's --help (a test fails when it differs).
docs:
	$(CARGO) build -p rollout-ext --bin kubectl-rollout_ext
	ROLLOUT_EXT_WRITE_DOCS=1 $(CARGO) test -p rollout-ext-e2e --test conventions every_command_and_flag

## control-plane: build (once) from their Go modules and cache kube-apiserver, controller-manager,
## scheduler and etcd of the release tests/cluster/k8s/go.mod requires (needs Go; `demo` does not).
control-plane:
	bash tests/cluster/install-control-plane.sh

## release: every released platform's binary (cross-compiled: zig for Linux and macOS, mingw-w64
## for Windows; deploy/cross-tools.sh installs them once) packed with LICENSE into dist/, each sha256 and the
## version written into krew-manifest.yaml (copied beside the archives).
release:
	bash deploy/release.sh dist

## release-check: the same archives in the quick release-check profile into
## $(TARGET_DIR)/release-check with a manifest of their own, and what runs them here (qemu-user,
## wine): tests/release.rs and tests/krew.rs prove them. The five platforms' builds are kept
## in the cache beside the test servers: after the first, a change rebuilds our crates only.
RELEASE_CHECK := $(TARGET_DIR)/release-check
RELEASE_CHECK_BUILD := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/rollout-ext/release-check-build
release-check:
	bash deploy/cross-tools.sh --runners >/dev/null
	@mkdir -p $(RELEASE_CHECK) && cp krew-manifest.yaml $(RELEASE_CHECK)/krew-manifest.yaml
	CARGO_TARGET_DIR=$(RELEASE_CHECK_BUILD) bash deploy/release.sh --profile release-check \
	  $(RELEASE_CHECK) $(RELEASE_CHECK)/krew-manifest.yaml
