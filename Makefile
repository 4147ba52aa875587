# Two commands on a fresh machine with Python 3.11 and make:
#   make run    installs what is needed and starts a whole cluster on 127.0.0.1 (data under ./data):
#               nsqlookupd, two nsqd and nsqadmin (http://127.0.0.1:4171); Ctrl-C stops it
#   make test   installs what is needed and runs every test
PYTHON ?= python3
UV_VERSION := 0.13.8
UV := .tools/bin/uv
export UV_PYTHON_DOWNLOADS := never
export UV_PROJECT_ENVIRONMENT := .venv
# Installed modules as .pyc: every daemon start (and the tests start hundreds) would otherwise
# compile Trio, Hypercorn and Starlette from source where bytecode is not written back.
export UV_COMPILE_BYTECODE := 1

.PHONY: install run test soak stress lint typecheck bench bench-tcp docs clean pipeline

$(UV):
	$(PYTHON) -m venv .tools
	.tools/bin/python -m pip install --quiet uv==$(UV_VERSION)

# The workspace's own packages are editable installs, which uv never compiles: compileall
# writes their bytecode (Python reads it even under PYTHONDONTWRITEBYTECODE), so that a daemon
# start does not compile nsqd's modules from source each time (docs/performance.md).
install: $(UV)
	$(UV) sync --all-packages --locked --python $(PYTHON) --quiet
	.venv/bin/python -m compileall -q -j 0 packages/*/src

run: install
	.venv/bin/nsq-cluster up --data-dir data $(RUN_ARGS)

# The clickstream pipeline on Spark (examples/clickstream/README.md) against the cluster `make run`
# keeps up in another terminal: live page views, nsq_to_file's archive, the streaming job every
# 10 s printing its windows and alerts (output under ./data/clickstream); Ctrl-C stops it.
pipeline: install
	cd examples/clickstream && ../../.venv/bin/python -m clickstream demo --out ../../data/clickstream $(PIPELINE_ARGS)

# mypy --strict ([tool.mypy] in pyproject.toml) over every package's code and the benchmark.
TYPED := packages/authd/src packages/client/src packages/cluster/src packages/common/src \
	packages/nsqadmin/src packages/nsqd/src packages/nsqlookupd/src packages/serving/src \
	packages/spark/src packages/testing/src bench

lint: install typecheck
	.venv/bin/ruff check .

typecheck: install
	.venv/bin/mypy $(TYPED)

test: lint
	.venv/bin/python -m pytest $(PYTEST_ARGS)

# The slow tests: soaks, and thousands of the storage model's random sequences per storage mode
# (NSQ_MODEL_SOAK=<n> sequences each; docs/design/storage.md, "How storage is crash-tested").
soak: install
	.venv/bin/python -m pytest -m slow $(PYTEST_ARGS)

# The whole suite STRESS_RUNS times in a row beside STRESS_BUSY busy processes (see the script).
STRESS_RUNS ?= 5
STRESS_BUSY ?= 2
stress: install
	scripts/stress-test.sh --no-install -n $(STRESS_RUNS) -b $(STRESS_BUSY) -- $(PYTEST_ARGS)

# The paths of the CPU-per-request goals, ours beside Go's (BENCH_ARGS="--go DIR"), one table;
# bench-tcp: nsqd's TCP scenarios, raw and library clients (docs/performance.md).
bench: install
	.venv/bin/python -m bench.goals $(BENCH_ARGS)

bench-tcp: install
	.venv/bin/python -m bench --client raw,library $(BENCH_ARGS)

docs: install
	.venv/bin/python scripts/gen_config_docs.py

clean:
	rm -rf .venv .tools .pytest_cache .ruff_cache
