run:
	python3 dev.py run

test:
	python3 dev.py test

.PHONY: run test
