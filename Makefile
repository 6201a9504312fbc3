.PHONY: demo test setup system-deps lint bench clean

demo: setup
	@bash scripts/system-deps.sh --optional || true
	.venv/bin/a2rl demo

test: setup system-deps
	.venv/bin/python -m pytest

setup:
	@bash scripts/setup.sh

system-deps:
	@bash scripts/system-deps.sh

lint: setup
	.venv/bin/ruff check .

bench: setup
	.venv/bin/python bench/tool_latency.py

clean:
	rm -rf .venv
