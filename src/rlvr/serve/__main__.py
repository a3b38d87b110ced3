"""`python -m rlvr.serve --model NAME [vLLM flags]`. The guard matters: vLLM's engine runs in a spawned process."""

from rlvr.serve.server import main

if __name__ == "__main__":
    main()
