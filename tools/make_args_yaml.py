#!/usr/bin/env python3
"""Writes the args.yaml that timm's train.py writes for a command line.

train.py saves yaml.safe_dump(args.__dict__) as args.yaml beside its
checkpoints, every one of its arguments included, and ctimm-train -c must
load any such file (tests/data/timm_args*.yaml are made with this). train.py
imports torch, so instead of importing it this reads its argparse calls with
the ast module and replays them, in order, on plain argparse parsers.

  tools/make_args_yaml.py path/to/timm/train.py [train.py arguments...] > args.yaml
  tools/make_args_yaml.py --flags path/to/timm/train.py > flags.txt

--flags lists train.py's options instead, one argument a line: its option strings (-b --batch-size),
its dest and its default. The fixture tests/data/train_py_flags.txt (CTest train_py_flags checks
ctimm-train knows each; tools/readme_train_flags.sh makes README's table of them) is
  tools/make_args_yaml.py --flags train.py > tests/data/train_py_flags.txt

The fixtures, from timm at aa4b5850 (train.py) and at v0.9.16 (train_v0.9.16.py):
  tools/make_args_yaml.py train.py > tests/data/timm_args.yaml
  tools/make_args_yaml.py train_v0.9.16.py > tests/data/timm_args_v0.9.16.yaml
  tools/make_args_yaml.py train.py --model test_resnet --epochs 1 -b 32 --img-size 32 \
      --device cpu --warmup-epochs 0 --log-interval 1000 -j 2 --mean 0.5 0.5 0.5 \
      --std 0.25 0.25 0.25 --scale 0.5 1.0 --ratio 0.8 1.25 --input-size 3 32 32 \
      --decay-milestones 10 20 --opt-betas 0.8 0.99 --lr-noise 0.4 0.9 \
      --cutmix-minmax 0.3 0.7 > tests/data/timm_args_lists.yaml
"""
import argparse
import ast
import operator
import sys

import yaml


class ParseKwargs(argparse.Action):
    """timm.utils.ParseKwargs (--model-kwargs, --opt-kwargs): key=value words to a dict."""

    def __call__(self, parser, namespace, values, option_string=None):
        kw = {}
        for value in values:
            if not value:
                continue
            key, value = value.split('=')
            try:
                kw[key] = ast.literal_eval(value)
            except ValueError:
                kw[key] = str(value)
        setattr(namespace, self.dest, kw)


# The names train.py's argparse calls refer to (type=int, action=utils.ParseKwargs).
NAMES = {'int': int, 'float': float, 'str': str, 'ParseKwargs': ParseKwargs}
BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def value(node):
    """A keyword's value: a literal, arithmetic on literals (3. / 4.) or one of NAMES."""
    if isinstance(node, ast.Name) and node.id in NAMES:
        return NAMES[node.id]
    if isinstance(node, ast.Attribute) and node.attr in NAMES:
        return NAMES[node.attr]
    if isinstance(node, ast.BinOp) and type(node.op) in BINOPS:
        return BINOPS[type(node.op)](value(node.left), value(node.right))
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [value(e) for e in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)
    if isinstance(node, ast.Dict):
        return {value(k): value(v) for k, v in zip(node.keys, node.values)}
    return ast.literal_eval(node)


def parser_calls(stmt):
    """The calls of a top-level statement: `x = f(...)`, `f(...)`, and `f(...),`."""
    node = stmt.value if isinstance(stmt, (ast.Assign, ast.Expr)) else None
    calls = node.elts if isinstance(node, ast.Tuple) else [node]
    return [c for c in calls if isinstance(c, ast.Call)]


def train_parser(source):
    """train.py's main parser, rebuilt from its module-level argparse calls."""
    objects = {}  # variable name -> the parser or group it holds
    for stmt in ast.parse(source).body:
        for call in parser_calls(stmt):
            f = call.func
            if not isinstance(f, ast.Attribute):
                continue
            args = [value(a) for a in call.args]
            kwargs = {k.arg: value(k.value) for k in call.keywords}
            if f.attr == 'ArgumentParser':
                obj = argparse.ArgumentParser(*args, **kwargs)
            elif isinstance(f.value, ast.Name) and f.value.id in objects and f.attr.startswith('add_'):
                obj = getattr(objects[f.value.id], f.attr)(*args, **kwargs)
            else:
                continue
            if isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    objects[target.id] = obj
    return objects['parser']


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ('-h', '--help'):
        sys.exit(__doc__.strip())
    flags = sys.argv[1] == '--flags'
    with open(sys.argv[1 + flags]) as f:
        parser = train_parser(f.read())
    if flags:
        for a in parser._actions:
            if a.option_strings and a.dest != 'help':
                default = yaml.safe_dump(a.default, default_flow_style=True).strip().removesuffix('...').strip()
                sys.stdout.write(f"{' '.join(a.option_strings)}\t{a.dest}\t{default}\n")
        return
    args = parser.parse_args(sys.argv[2:])
    sys.stdout.write(yaml.safe_dump(args.__dict__, default_flow_style=False))


if __name__ == '__main__':
    main()
