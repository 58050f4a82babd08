"""CompiledProgram: a Program prepared for the executor, optionally data-parallel.

Example::

    compiled = fluid.CompiledProgram(train_program).with_data_parallel(loss_name=loss.name)
    exe = fluid.Executor(fluid.CPUPlace())
    loss_per_device, = exe.run(compiled, feed={"x": x}, fetch_list=[loss])

The ParallelExecutor behind it is built on the first run (from the executor's place and the
run's scope) and reused afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..feed_fetch import fetch_names
from ..framework import Program, Variable
from ..passes.compile_regions import compile_regions
from ..place import CUDAPlace
from ..placement import is_placed
from ..scope import Scope
from .parallel_executor import ParallelExecutor
from .strategy import BuildStrategy, ExecutionStrategy, build_pipeline
from .tiered_start import TieredStart

__all__ = ["CompiledProgram", "register_inference"]

# NOTE: the inference API (parafluid/inference_api/) is built on the executors, so it
# registers here how a program compiled with ``with_inference_optimize`` runs; the
# executors never import it. (config types, run(compiled, exe, feed, fetch_list,
# return_numpy))
_INFERENCE: list[tuple[tuple[type, ...], Callable[..., list[Any]]]] = []


def register_inference(config_types: tuple[type, ...],
                       run: Callable[..., list[Any]]) -> None:
    """Install the inference API: the config classes ``with_inference_optimize`` accepts,
    and ``run(compiled, exe, feed, fetch_list, return_numpy)`` that runs such a program."""
    _INFERENCE[:] = [(tuple(config_types), run)]


class CompiledProgram:
    """Wrap ``program`` so that ``Executor.run`` compiles it into a multi-device graph.

    Args:
        program_or_graph: the Program.
        build_strategy: a BuildStrategy (may also be given to ``with_data_parallel``).

    Without ``with_data_parallel`` the program runs on the executor's place alone, through
    the same graph machinery (so build-strategy passes apply). With
    ``build_strategy.enable_compile`` and nothing else that needs a ParallelExecutor
    (micro-batches, placement, ``share_vars_from``, several iterations per run, in-place
    planning, graph dumps), a
    single-device program runs as compiled segments straight on the executor's own plan:
    the build passes, then the segmentation pass, once per fetch list.
    """

    def __init__(self, program_or_graph: Program, build_strategy: BuildStrategy | None = None
                 ) -> None:
        if not isinstance(program_or_graph, Program):
            raise TypeError(f"CompiledProgram: expected a Program, got "
                            f"{type(program_or_graph).__name__}")
        if build_strategy is not None and not isinstance(build_strategy, BuildStrategy):
            raise TypeError(f"CompiledProgram: build_strategy must be a BuildStrategy, got "
                            f"{type(build_strategy).__name__}")
        self._program = program_or_graph
        self._build_strategy = build_strategy
        self._exec_strategy: ExecutionStrategy | None = None
        self._loss_name: str | None = None
        self._share_vars_from: CompiledProgram | None = None
        self._places: Any = None
        self._is_data_parallel = False
        self._executor: ParallelExecutor | None = None
        self._scope: Scope | None = None
        self._segmented: dict[tuple, Program] = {}  # (version, fetch) -> program run
        self._tiers: dict[int, TieredStart] = {}  # id(segmented program) -> its tiered start
        self._placed: tuple[int, bool] = (-1, False)  # (version, placed on devices)
        self._is_inference = False
        self._infer_config: Any = None  # an AnalysisConfig or NativeConfig
        self._predictor: Any = None

    def with_inference_optimize(self, config: Any) -> CompiledProgram:
        """Run as the inference predictor of ``config`` (``fluid.core.AnalysisConfig`` or
        ``NativeConfig``): the saved model it names, loaded and pruned for inference as
        ``fluid.core.create_paddle_predictor(config)`` loads it, in a scope of its own.

        ``exe.run(compiled, feed=[PaddleTensor, ...])`` returns the predictor's output
        PaddleTensors (as Fluid); ``exe.run(compiled, feed={name: array}, fetch_list=...)``
        runs the loaded program on that Executor (default fetch: the model's targets).

        Example::

            config = fluid.core.AnalysisConfig("model_dir")
            compiled = fluid.CompiledProgram(inference_program).with_inference_optimize(config)
            out, = exe.run(compiled, feed={"x": x})

        Returns this CompiledProgram.
        """
        if self._is_data_parallel:
            raise ValueError("CompiledProgram.with_inference_optimize: the program is already "
                             "data-parallel; a program is compiled either for data "
                             "parallelism or for inference")
        if self._is_inference:
            raise ValueError("CompiledProgram.with_inference_optimize was already called on "
                             "this program; create a new CompiledProgram")
        config_types = _INFERENCE[0][0] if _INFERENCE else ()
        if not isinstance(config, config_types):
            raise TypeError("CompiledProgram.with_inference_optimize: config must be a "
                            "fluid.core.AnalysisConfig or NativeConfig, got "
                            f"{type(config).__name__}")
        self._is_inference = True
        self._infer_config = config
        return self

    _with_inference_optimize = with_inference_optimize  # Fluid 1.6's own tests' spelling

    def with_data_parallel(self, loss_name: str | None = None,
                           build_strategy: BuildStrategy | None = None,
                           exec_strategy: ExecutionStrategy | None = None,
                           share_vars_from: CompiledProgram | None = None,
                           places: Sequence[Any] | None = None) -> CompiledProgram:
        """Run data-parallel on ``places`` (default: CPU_NUM CPU devices or every GPU).

        Args:
            loss_name: the loss variable (name or Variable); needed to aggregate gradients.
            build_strategy, exec_strategy: see BuildStrategy / ExecutionStrategy.
            share_vars_from: another data-parallel CompiledProgram whose parameters this one
                uses (it must run first).
            places: the devices, e.g. ``fluid.cpu_places(2)``.

        Returns this CompiledProgram.
        """
        if self._is_data_parallel:
            raise RuntimeError("CompiledProgram.with_data_parallel was already called on this "
                               "program; create a new CompiledProgram")
        if self._is_inference:
            raise ValueError("CompiledProgram.with_data_parallel: the program is compiled for "
                             "inference (with_inference_optimize); a program is compiled "
                             "either for data parallelism or for inference")
        if share_vars_from is not None and not isinstance(share_vars_from, CompiledProgram):
            raise TypeError("CompiledProgram.with_data_parallel: share_vars_from must be a "
                            f"CompiledProgram, got {type(share_vars_from).__name__}")
        if share_vars_from is not None and not share_vars_from._is_data_parallel:
            raise ValueError("CompiledProgram.with_data_parallel: share_vars_from is not "
                             "data-parallel, so it has no device scopes to share")
        if isinstance(loss_name, Variable):
            loss_name = loss_name.name
        self._is_data_parallel = True
        self._loss_name = loss_name
        if build_strategy is not None:
            self._build_strategy = build_strategy
        self._exec_strategy = exec_strategy
        self._share_vars_from = share_vars_from
        self._places = places
        return self

    def _run_from_executor(self, exe: Any, feed: Any, fetch_list: list[Any], scope: Scope,
                           return_numpy: bool) -> list[Any]:
        if self._is_inference:
            return _INFERENCE[0][1](self, exe, feed, fetch_list, return_numpy)
        if self._executor is None and self._compiles_alone(feed):
            if isinstance(feed, (list, tuple)):
                feed = feed[0]
            program = self._segments_for(fetch_names(fetch_list))
            tier = self._tiers.get(id(program))
            if tier is not None:  # tiered: interpreted until the compiled code is ready
                program = tier.program(feed or {}, scope)
            return exe.run(program, feed=feed, fetch_list=fetch_list, scope=scope,
                           return_numpy=return_numpy)
        if self._executor is None:
            self._executor = self._compile(exe, scope)
        elif scope is not self._scope:
            raise ValueError("CompiledProgram: it was compiled for another scope; run it with "
                             "the scope of its first run, or create a new CompiledProgram")
        return self._executor._run(fetch_list, feed or None, return_numpy, True,
                                   check_nan_inf=exe.check_nan_inf)

    def _compiles_alone(self, feed: Any) -> bool:
        """Whether this runs as compiled segments on the executor's own plan (one device, no
        ParallelExecutor feature asked for)."""
        bs, es = self._build_strategy, self._exec_strategy
        if bs is None or not bs.enable_compile or self._is_data_parallel or \
                bs.enable_inplace or bs.debug_graphviz_path:
            return False  # (the ParallelExecutor applies those fields, or says why not)
        if self._placed[0] != self._program._version:  # (scanning the ops once a version)
            self._placed = (self._program._version, is_placed(self._program))
        return (self._share_vars_from is None and bs.num_microbatches == 1
                and (es is None or es.num_iteration_per_run == 1) and not self._placed[1]
                and (isinstance(feed, dict) or feed is None
                     or (isinstance(feed, (list, tuple)) and len(feed) == 1)))

    def _segments_for(self, fetch: Sequence[str]) -> Program:
        """The program this runs for ``fetch``: the build passes, then the segmentation
        pass keeping the fetch targets (built once per program version and fetch list)."""
        key = (self._program._version, tuple(fetch))
        program = self._segmented.get(key)
        if program is None:
            passes = build_pipeline(self._build_strategy, 1, self._loss_name)
            plain = passes(self._program)
            background = self._build_strategy.compile_in_background
            program = compile_regions(plain, keep=[*fetch, *filter(None, [self._loss_name])],
                                      background=background)
            if background:
                self._tiers[id(program)] = TieredStart(plain, program)
            self._segmented = {k: v for k, v in self._segmented.items()
                               if k[0] == key[0]}
            self._segmented[key] = program
            live = {id(p) for p in self._segmented.values()}
            self._tiers = {k: v for k, v in self._tiers.items() if k in live}
        return program

    def _compile(self, exe: Any, scope: Scope) -> ParallelExecutor:
        use_cuda = isinstance(exe.place, CUDAPlace)
        places = self._places if self._is_data_parallel else [exe.place]
        share = None
        if self._share_vars_from is not None:
            share = self._share_vars_from._executor
            if share is None:
                raise RuntimeError("CompiledProgram: share_vars_from has not run yet, so there "
                                   "are no parameters to share; run it first")
        self._scope = scope
        return ParallelExecutor(use_cuda, loss_name=self._loss_name,
                                main_program=self._program, share_vars_from=share,
                                exec_strategy=self._exec_strategy,
                                build_strategy=self._build_strategy, scope=scope,
                                places=places)
