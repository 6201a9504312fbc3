.PHONY: demo test setup system-deps lint bench clean image

demo: setup
	@bash scripts/system-deps.sh --optional || true
	.venv/bin/a2rl demo

test: system-deps
	@A2RL_EXTRAS=dev,docker,fleet,alfworld bash scripts/setup.sh
	@bash scripts/docker-engine.sh
	@bash docker/build-test-image.sh >/dev/null
	@.venv/bin/python -m tests.harness_wheels || true
	@# three workers on two cores: at two, the tests kept the cores busy about half of the
	@# time (they wait on jobs, deadlines, containers and servers); bench/RESULTS.md has the figures
	.venv/bin/python -m pytest -n 3 --dist loadfile --no-loadscope-reorder

setup:
	@bash scripts/setup.sh

system-deps:
	@bash scripts/system-deps.sh

lint: setup
	.venv/bin/ruff check .

bench: setup
	.venv/bin/python bench/tool_latency.py
	.venv/bin/python bench/tool_bytes.py
	.venv/bin/python bench/grading.py
	.venv/bin/python bench/view_scale.py
	.venv/bin/python bench/humaneval_grading.py
	A2RL_BASE_MODEL=tiny-llama .venv/bin/python bench/submission_rss.py
	.venv/bin/python bench/audit.py

# The sandbox image for real runs (CUDA PyTorch with trl); needs a registry to pull its base.
image:
	docker build -t a2rl-sandbox:latest -f docker/Dockerfile .

clean:
	rm -rf .venv
