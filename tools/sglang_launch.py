"""Start SGLang's server with the triec grammar backend registered, for when entry points are filtered.

    python tools/sglang_launch.py --model-path Qwen/Qwen2.5-7B-Instruct --grammar-backend triec [sglang options]

triec declares an ``sglang.srt.plugins`` entry point, and SGLang runs it in every
one of its processes, so ``python -m sglang.launch_server ... --grammar-backend
triec`` is the usual command. Use this script instead where that entry point is
not run: ``SGLANG_PLUGINS`` set to a list without ``triec``, a platform plugin
excluding other distributions, or triec on ``PYTHONPATH`` rather than installed.

The registration is module-level code on purpose. SGLang starts its scheduler
processes with the ``spawn`` method, which imports this file again in each of
them (as ``__mp_main__``); a registration under ``if __name__ == "__main__":``
(or in ``python -c``) would be missing there, and the scheduler would stop with
"Invalid grammar backend: triec". The rest is ``sglang.launch_server``'s own
main.
"""

import os
import sys

from triec.integrations.sglang import register

register()

if __name__ == "__main__":
    from sglang.launch_server import run_server
    from sglang.srt.plugins import load_plugins
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.utils import kill_process_tree

    load_plugins()
    server_args = prepare_server_args(sys.argv[1:])
    try:
        run_server(server_args)
    finally:
        kill_process_tree(os.getpid(), include_parent=False)
