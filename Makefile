# Two commands on a fresh machine with Python 3.11 and make:
#   make run    installs what is needed and starts nsqd on 127.0.0.1:4150/4151 (data under ./data)
#   make test   installs what is needed and runs every test
PYTHON ?= python3
UV_VERSION := 0.13.8
UV := .tools/bin/uv
export UV_PYTHON_DOWNLOADS := never
export UV_PROJECT_ENVIRONMENT := .venv

.PHONY: install run test lint bench clean

$(UV):
	$(PYTHON) -m venv .tools
	.tools/bin/python -m pip install --quiet uv==$(UV_VERSION)

install: $(UV)
	$(UV) sync --all-packages --locked --python $(PYTHON) --quiet

run: install
	mkdir -p data/nsqd
	.venv/bin/nsqd --tcp-address=127.0.0.1:4150 --http-address=127.0.0.1:4151 --data-path=data/nsqd

lint: install
	.venv/bin/ruff check .

test: lint
	.venv/bin/python -m pytest $(PYTEST_ARGS)

bench: install
	.venv/bin/python -m bench $(BENCH_ARGS)

clean:
	rm -rf .venv .tools .pytest_cache .ruff_cache
