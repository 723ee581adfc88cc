"""The pyoperon backend: genetic programming with local constant tuning, through pyoperon's
low-level API.

`pyoperon.sklearn.SymbolicRegressor` only scores the values of a tree against one target column,
so it cannot fit a drift's *slope*, which is the quantity that enters the policy gradient. This
module assembles the same algorithm from pyoperon's parts (as the sklearn wrapper does) and
swaps the fitness evaluator by objective:

- "value": `pyoperon.Evaluator` with the MSE against the drift values, with linear scaling (the
  best scale and offset of each tree are fitted in closed form), all in C++.
- "slope": a `pyoperon.UserDefinedEvaluator`, whose Python callback measures the tree's
  d f / d ratio by central differences (pyoperon evaluates the tree on two copies of the data,
  shifted by +-h in log r), fits the best scale in closed form and returns the MSE against the
  drift's slopes. The offset of f does not matter: it cancels in the candidate.

In both cases each offspring's constants are tuned by pyoperon's Levenberg-Marquardt against the
drift values (the tuner only knows the dataset's target column). For the slope objective this
is a proxy the selection then corrects: a tree whose values fit the drift has its slopes too,
and the tuning only moves constants, while which trees survive is decided by the slope error.
It pays: fitting PPO-clip's slopes (population 300, 50 generations, 32 x 32 grid), 4 of 5 seeds
found its exact form with the tuning and 1 of 5 without it.

pyoperon is a single-precision build: the data are float32, and a `pyoperon.Dataset` keeps a
view of the numpy array it is given, so the arrays are held alongside it for its lifetime.
"""

from __future__ import annotations

import logging
import time
from typing import Any, NamedTuple

import numpy as np
import pyoperon as op

from metarl.symbolic.expression import (
    VARIABLES,
    Constant,
    Expression,
    Inputs,
    SymbolicError,
    Variable,
    call,
)
from metarl.symbolic.settings import SymbolicSettings

logger = logging.getLogger(__name__)

# pyoperon's node name for each operator. Nodes are matched by name, not by NodeType member:
# in pyoperon 0.6.2 the Python enum members Fmin and Fmax are swapped (a node made from
# NodeType.Fmin is named "fmax" and computes the maximum), and the name is what is computed.
NODE_NAMES = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "div": "/",
    "aq": "aq",
    "fmax": "fmax",
    "fmin": "fmin",
    "square": "square",
    "tanh": "tanh",
    "abs": "abs",
    "exp": "exp",
    "log": "log",
    "sqrt": "sqrt",
}
OPERATOR_OF_NODE = {name: operator for operator, name in NODE_NAMES.items()}
NODE_TYPES = {
    OPERATOR_OF_NODE[op.Node(node_type).Name]: node_type
    for node_type in op.NodeType.__members__.values()
    if op.Node(node_type).Name in OPERATOR_OF_NODE
}
# the mutation operators, with equal weights (pyoperon's sklearn wrapper offers these and two
# more constant perturbations)
MUTATIONS = (
    "onepoint",
    "changevar",
    "changefunc",
    "insertsubtree",
    "replacesubtree",
    "removesubtree",
)
WORST_FITNESS = float(np.finfo(np.float32).max)


class OperonData(NamedTuple):
    """A regression's data as pyoperon datasets, with the arrays they view kept alive."""

    dataset: Any  # op.Dataset over [log_r, r1, A, value]
    shifted: tuple[Any, Any]  # the same at log r + h and log r - h (slope objective)
    arrays: tuple[np.ndarray, ...]  # the float32 arrays the datasets view
    names: dict[int, str]  # variable hash -> name in VARIABLES
    target: Any  # the op.Variable of the value column


def _data(inputs: Inputs, value: np.ndarray, step: float) -> OperonData:
    columns = inputs.columns().astype(np.float64)
    log_r, r1, advantage = columns.T
    ratio = r1 + 1.0
    arrays = []
    for shift in (0.0, step, -step):
        shifted = np.column_stack([log_r + shift, ratio * np.exp(shift) - 1.0, advantage, value])
        arrays.append(np.asfortranarray(shifted, dtype=np.float32))
    datasets = [op.Dataset(array) for array in arrays]
    ordered = sorted(datasets[0].Variables, key=lambda variable: variable.Index)
    return OperonData(
        dataset=datasets[0],
        shifted=(datasets[1], datasets[2]),
        arrays=tuple(arrays),
        names={variable.Hash: name for variable, name in zip(ordered, VARIABLES)},
        target=ordered[-1],
    )


def to_expression(tree: Any, names: dict[int, str]) -> Expression:
    """A pyoperon tree as an Expression, by walking its nodes.

    pyoperon stores a tree in postfix order; a function's first operand is the subtree just
    before it, so with a stack of finished subtrees the first one popped is the first operand.
    A variable node carries a weight: `w * x`.

    Args:
        tree: a `pyoperon.Tree`.
        names: variable hash -> variable name.

    Returns:
        The expression.

    Raises:
        SymbolicError: a node of a type this package cannot write as source.
    """
    stack: list[Expression] = []
    for node in tree.Nodes:
        if node.IsConstant:
            stack.append(Constant(float(node.Value)))
        elif node.IsVariable:
            variable = Variable(names[node.HashValue])
            weight = float(node.Value)
            stack.append(variable if weight == 1.0 else call("mul", Constant(weight), variable))
        else:
            operator = OPERATOR_OF_NODE.get(node.Name)
            if operator is None:
                raise SymbolicError(
                    f"pyoperon returned a {node.Name!r} node, which is not supported"
                )
            args = [stack.pop() for _ in range(node.Arity)]
            stack.append(call(operator, *args))
    if len(stack) != 1:
        raise SymbolicError(f"pyoperon returned a malformed tree ({len(stack)} roots)")
    return stack[0]


class SlopeFitness:
    """The slope objective: the MSE of the tree's best-scaled d f / d ratio against the drift's
    slopes, with the derivative taken by central differences in log r."""

    def __init__(self, data: OperonData, slope: np.ndarray, step: float):
        self.data = data
        self.slope = np.asarray(slope, np.float64)
        # d f / d r = (d f / d log r) / r
        self.denominator = 2.0 * step * (data.arrays[0][:, 1].astype(np.float64) + 1.0)
        self.rows = op.Range(0, data.dataset.Rows)

    def derivative(self, tree: Any) -> np.ndarray:
        """d f / d ratio of a pyoperon tree at every sample (float64)."""
        plus, minus = (op.Evaluate(tree, dataset, self.rows) for dataset in self.data.shifted)
        return (plus.astype(np.float64) - minus) / self.denominator

    def scale(self, derivative: np.ndarray) -> float:
        """The scale s minimising |s * derivative - slope|^2 (0 for a flat tree)."""
        norm = float(derivative @ derivative)
        return float(derivative @ self.slope) / norm if norm > 0.0 else 0.0

    def __call__(self, rng: Any, individual: Any) -> list[float]:
        derivative = self.derivative(individual.Genotype)
        if not np.all(np.isfinite(derivative)):
            return [WORST_FITNESS]
        residual = self.scale(derivative) * derivative - self.slope
        error = float(np.mean(residual * residual))
        return [error if np.isfinite(error) else WORST_FITNESS]


def _mutation(
    name: str,
    inputs: list[int],
    pset: Any,
    creator: Any,
    coefficients: Any,
    settings: SymbolicSettings,
) -> Any:
    if name == "onepoint":
        mutation = op.NormalOnePointMutation()
        mutation.ParameterizeDistribution(0.0, 1.0)
        return mutation
    if name == "changevar":
        return op.ChangeVariableMutation(inputs)
    if name == "changefunc":
        return op.ChangeFunctionMutation(pset)
    if name == "insertsubtree":
        return op.InsertSubtreeMutation(
            creator, coefficients, settings.max_depth, settings.max_length
        )
    if name == "replacesubtree":
        return op.ReplaceSubtreeMutation(
            creator, coefficients, settings.max_depth, settings.max_length
        )
    return op.RemoveSubtreeMutation(pset)


def search(
    inputs: Inputs, value: np.ndarray, slope: np.ndarray, settings: SymbolicSettings
) -> Expression:
    """Fit f(log_r, r1, A) to drift samples with pyoperon's genetic programming.

    Args:
        inputs: the samples' features.
        value: the drift at the samples (the target of the "value" objective).
        slope: d drift / d ratio at the samples (the target of the "slope" objective).
        settings: operators, limits, objective and budget.

    Returns:
        The best tree of the run, with its fitted scale (its offset is dropped: it cancels in
        the candidate).

    Raises:
        SymbolicError: pyoperon returned a tree this package cannot convert.
    """
    data = _data(inputs, np.asarray(value, np.float64), settings.slope_step)
    rows = data.dataset.Rows
    problem = op.Problem(data.dataset)
    problem.TrainingRange = op.Range(0, rows)
    problem.TestRange = op.Range(rows - 1, rows)  # unused; pyoperon wants one
    problem.Target = data.target
    problem.InputHashes = list(data.names)
    primitives = op.NodeType.Constant | op.NodeType.Variable
    for name in settings.operators:
        primitives |= NODE_TYPES[name]
    problem.ConfigurePrimitiveSet(int(primitives))
    pset = problem.PrimitiveSet
    inputs_hashes = list(data.names)

    creator = op.BalancedTreeCreator(pset, inputs_hashes, 0.0)
    coefficients = op.NormalCoefficientInitializer()
    coefficients.ParameterizeDistribution(0.0, 1.0)
    dtable = op.DispatchTable()
    tuner = op.LMOptimizer(dtable, problem, settings.local_iterations, 0)

    slope_fitness = None
    if settings.objective == "slope":
        slope_fitness = SlopeFitness(data, slope, settings.slope_step)
        evaluator = op.UserDefinedEvaluator(problem, slope_fitness)
    else:
        evaluator = op.Evaluator(problem, dtable, op.MSE(), True)  # True: linear scaling
    evaluator.Budget = settings.max_evaluations

    comparison = op.SingleObjectiveComparison(0)
    selector = op.TournamentSelector(comparison)
    selector.TournamentSize = 5
    reinserter = op.KeepBestReinserter(comparison)
    crossover = op.SubtreeCrossover(0.9, settings.max_depth, settings.max_length)
    mutation = op.MultiMutation()
    # MultiMutation holds raw pointers: keep the operators referenced until the run ends
    mutations = [
        _mutation(name, inputs_hashes, pset, creator, coefficients, settings) for name in MUTATIONS
    ]
    for each in mutations:
        mutation.Add(each, 1.0)
    local_search = op.CoefficientOptimizer(tuner)
    generator = op.BasicOffspringGenerator(
        evaluator, crossover, mutation, selector, selector, local_search
    )
    min_arity, _ = pset.FunctionArityLimits()
    initializer = op.UniformLengthTreeInitializer(creator)
    initializer.ParameterizeDistribution(min_arity + 1, min(10, settings.max_length))
    initializer.MinDepth = 1
    initializer.MaxDepth = 1000
    config = op.GeneticAlgorithmConfig(
        generations=settings.generations,
        max_evaluations=settings.max_evaluations,
        local_iterations=settings.local_iterations,
        population_size=settings.population_size,
        pool_size=settings.population_size,
        p_crossover=1.0,
        p_mutation=0.25,
        p_local=1.0,
        p_lamarck=1.0,
        epsilon=1e-5,
        seed=settings.rng_seed,
        max_time=settings.max_time_s,
    )
    algorithm = op.GeneticProgrammingAlgorithm(
        config, problem, initializer, coefficients, generator, reinserter
    )
    started = time.monotonic()

    def report() -> None:
        if algorithm.Generation % 10 == 0:
            logger.debug(
                "generation %d: best fitness %.4g (%.1f s)",
                algorithm.Generation,
                algorithm.BestModel.GetFitness(0),
                time.monotonic() - started,
            )

    algorithm.Run(op.RandomGenerator(np.uint64(settings.rng_seed)), report, settings.n_threads)
    best = algorithm.BestModel
    tree = best.Genotype
    logger.info(
        "pyoperon: %d generations, %d evaluations, fitness %.4g in %.1f s",
        algorithm.Generation,
        evaluator.CallCount,
        best.GetFitness(0),
        time.monotonic() - started,
    )
    if slope_fitness is not None:
        scale = slope_fitness.scale(slope_fitness.derivative(tree))
    else:
        predicted = op.Evaluate(dtable, tree, data.dataset, problem.TrainingRange)
        scale, _ = op.FitLeastSquares(predicted, data.arrays[0][:, -1])
    expression = to_expression(tree, data.names)
    return expression if scale == 1.0 else call("mul", Constant(float(scale)), expression)
