"""pgbench scripts are split into commands as pgbench splits them, and every script error is one sentence that
names the file, the line and the column of the mistake."""

from __future__ import annotations

import pickle

import pytest

from capmark.workloads.pgscript.errors import ScriptError
from capmark.workloads.pgscript.parse import (
    ElseCommand,
    EndifCommand,
    IfCommand,
    PipelineCommand,
    SetCommand,
    ShellCommand,
    SleepCommand,
    SqlCommand,
    parse_define,
    parse_script,
    read_script,
)


def sql(script: str) -> list[SqlCommand]:
    return [c for c in parse_script(script, "t.sql").commands if isinstance(c, SqlCommand)]


def test_sql_commands_end_at_semicolons_outside_quotes_comments_and_parentheses():
    cmds = sql("select ';' as a, $$;$$, $tag$ ; $x$ ; $tag$, E'\\';', \"a;b\", (1;2) /* ; */;\n"
               "select 'it''s;' -- a comment; not a command\n, 2;\n"
               "select 'a'\n';b';\n"  # a string continued on the next line is one literal
               "create function f() returns int language sql begin atomic select 1; select 2; end;\n"
               "select 3")
    assert [c.text for c in cmds] == [
        "select ';' as a, $$;$$, $tag$ ; $x$ ; $tag$, E'\\';', \"a;b\", (1;2) /* ; */;",
        "select 'it''s;' ",
        "select 'a'",
        "create function f() returns int language sql begin atomic select 1; select 2; end;",
        "select 3",
    ]
    assert cmds[1].chunks == ("select 'it''s;' \n, 2;",)  # the -- comment is dropped, as pgbench drops it
    assert [(c.line, c.column) for c in cmds] == [(1, 1), (2, 1), (4, 1), (6, 1), (7, 1)]


def test_variables_are_colon_names_outside_quotes_not_casts_or_assignments():
    (cmd,) = sql("  update t set a = a + :delta, b = 'x:y', c = c::int, d := 1 where id = :id and e = \\:lit\n"
                 "  and f = :id;")
    assert cmd.variables == ("delta", "id", "id")  # one parameter per reference, as pgbench
    assert cmd.variable_lines == (1, 1, 2)
    assert cmd.parameterized == ("update t set a = a + $1, b = 'x:y', c = c::int, d := 1 where id = $2 and e = :lit"
                                 "\n  and f = $3;")
    assert (cmd.line, cmd.column) == (1, 3)


def test_meta_commands_are_typed_and_gset_attaches_to_the_sql_before_it():
    script = parse_script("\\set aid random(1, 100000 * :scale)\n"
                          "select abalance from t where aid = :aid \\gset p_\n"
                          "select 1 as a \\; select 2 as b\n\\aset\n"
                          "\\sleep 10 ms\n\\sleep 5us\n\\sleep :pause\n\\SLEEP 2\n"
                          "\\if :aid > 5\n\\elif :aid < 0\n\\else\n\\endif\n"
                          "\\startpipeline\nselect 1;\n\\syncpipeline\n\\endpipeline\n"
                          "\\shell echo hi\n\\setshell x echo 1\n", "t.sql")
    kinds = [type(c).__name__ for c in script.commands]
    assert kinds == ["SetCommand", "SqlCommand", "SqlCommand", "SleepCommand", "SleepCommand", "SleepCommand",
                     "SleepCommand", "IfCommand", "IfCommand", "ElseCommand", "EndifCommand", "PipelineCommand",
                     "SqlCommand", "PipelineCommand", "PipelineCommand", "ShellCommand", "ShellCommand"]
    c = script.commands
    assert isinstance(c[0], SetCommand) and c[0].name == "aid"
    assert (c[1].assign, c[1].prefix) == ("gset", "p_")
    assert (c[2].assign, c[2].prefix, c[2].compound) == ("aset", "", True)
    assert [(s.amount, s.variable, s.unit_us) for s in c[3:7] if isinstance(s, SleepCommand)] == [
        (10, None, 1000), (5, None, 1), (0, "pause", 1_000_000), (2, None, 1_000_000)]
    assert isinstance(c[7], IfCommand) and (c[7].next_branch, c[7].endif) == (8, 10)
    assert isinstance(c[8], IfCommand) and (c[8].kind, c[8].next_branch, c[8].endif) == ("elif", 9, 10)
    assert isinstance(c[9], ElseCommand) and c[9].endif == 10 and isinstance(c[10], EndifCommand)
    assert [p.kind for p in c if isinstance(p, PipelineCommand)] == ["start", "sync", "end"]
    assert [(s.args, s.target) for s in c if isinstance(s, ShellCommand)] == [(("echo", "hi"), None),
                                                                              (("echo", "1"), "x")]
    assert script.uses_shell and script.uses_pipeline and script.compound_commands == (c[2],)


def test_nested_conditionals_link_each_branch_to_its_own_endif():
    c = parse_script("\\if 1\n\\if 0\nselect 1;\n\\else\nselect 2;\n\\endif\n\\elif 2\nselect 3;\n\\endif\n").commands
    outer, inner, inner_else, outer_elif = c[0], c[1], c[3], c[6]
    assert isinstance(outer, IfCommand) and (outer.next_branch, outer.endif) == (6, 8)
    assert isinstance(inner, IfCommand) and (inner.next_branch, inner.endif) == (3, 5)
    assert isinstance(inner_else, ElseCommand) and inner_else.endif == 5
    assert isinstance(outer_elif, IfCommand) and (outer_elif.next_branch, outer_elif.endif) == (8, 8)


def test_a_backslash_at_the_end_of_a_line_continues_a_meta_command():
    (cmd,) = parse_script("\\set x 1 + \\\n  2 * 3\n").commands
    assert isinstance(cmd, SetCommand) and cmd.expr is not None and cmd.text == "\\set x 1 + \\"


def test_a_parsed_script_pickles_for_worker_processes():
    script = parse_script("\\set a random(1, 10)\n\\if :a > 3\nselect :a;\n\\endif\n")
    assert pickle.loads(pickle.dumps(script)) == script


@pytest.mark.parametrize(("script", "where", "words"), [
    ("select 1;\n\\sett x 1\n", "line 2, column 1", "unknown meta-command \\sett; the meta-commands are \\set"),
    ("\\set x 1 +\n", "line 1, column 11", "syntax error at end of line"),
    ("\\set x foo(1)\n", "line 1, column 8", "unknown function foo()"),
    ("\\set x abs(1, 2)\n", "line 1, column 8", "abs() takes 1 argument, not 2"),
    ("\\set x hash()\n", "line 1, column 8", "hash() takes 1 or 2 arguments, not 0"),
    ("\\set x least()\n", "line 1, column 8", "least() needs at least one argument"),
    ("\\set x 9223372036854775808\n", "line 1, column 8", "syntax error at 9223372036854775808"),
    ("\\set x 99999999999999999999\n", "line 1, column 8", "bigint constant overflow"),
    ("\\set x 1e999\n", "line 1, column 8", "double constant overflow"),
    ("\\set x 1 < 2 < 3\n", "line 1, column 14", "syntax error at <"),
    ("\\set x 1 = 2 <> 3\n", "line 1, column 14", "syntax error at <>"),
    ("\\set x 1 is 5\n", "line 1, column 13", "expected NULL, TRUE or FALSE"),
    ("\\set x case 1 when 2 then 3 end\n", "line 1, column 13", "expected WHEN"),
    ("\\set x (1 + 2\n", "line 1, column 14", "expected ')'"),
    ("\\set x 1 @ 2\n", "line 1, column 10", "unexpected character '@'"),
    ("\\set x :\n", "line 1, column 8", "unexpected character ':'"),
    ("\\set x foo\n", "line 1, column 8", "a variable is written :foo"),
    ("\\set 1x 2\n", "line 1, column 6", "invalid variable name '1x'"),
    ("\\set\n", "line 1, column 1", "\\set needs a variable name and an expression"),
    ("\\set x\n", "line 1, column 7", "missing expression"),
    ("select 1;\n\n  \\set y 3 +* 2\n", "line 3, column 13", "syntax error at *"),
    ("\\set x 1 \\\n + * 2\n", "line 2, column 4", "syntax error at *"),
    ("\\if 1\nselect 1;\n", "line 1, column 1", "\\if without a matching \\endif"),
    ("\\else\n", "line 1, column 1", "\\else without a matching \\if"),
    ("\\if 1\n\\else\n\\elif 2\n\\endif\n", "line 3, column 1", "\\elif after \\else"),
    ("\\if 1\n\\else\n\\else\n\\endif\n", "line 3, column 1", "\\else after \\else"),
    ("\\endif\n", "line 1, column 1", "\\endif without a matching \\if"),
    ("\\if 1\n\\else foo\n\\endif\n", "line 2, column 7", "\\else takes no argument"),
    ("\\gset\n", "line 1, column 1", "\\gset must follow an SQL command"),
    ("\\set x 1\n\\aset\n", "line 2, column 1", "\\aset must follow an SQL command"),
    ("select 1 \\gset\n\\gset\n", "line 2, column 1", "\\gset must follow an SQL command"),
    ("select 1 as a \\gset p q\n", "line 1, column 23", "\\gset takes at most one argument"),
    ("\\sleep 10 minutes\n", "line 1, column 11", "unrecognized time unit 'minutes'"),
    ("\\sleep 10x\n", "line 1, column 10", "unrecognized time unit 'x'"),
    ("\\sleep abc\n", "line 1, column 8", "invalid sleep time 'abc'"),
    ("\\sleep 10ms ms\n", "line 1, column 8", "invalid sleep time '10ms'"),
    ("\\sleep 1 s 2\n", "line 1, column 12", "\\sleep takes a number or :variable"),
    ("\\sleep\n", "line 1, column 1", "\\sleep needs a duration"),
    ("\\shell\n", "line 1, column 1", "\\shell needs a command"),
    ("\\setshell x\n", "line 1, column 1", "\\setshell needs a variable name and a command"),
    ("select 'abc;\n", "line 1, column 8", "unterminated quoted string"),
    ("select \"abc;\n", "line 1, column 8", "unterminated quoted identifier"),
    ("select $q$ abc;\n", "line 1, column 8", "unterminated dollar-quoted string $q$"),
    ("select 1 /* x /* y */\n", "line 1, column 10", "unterminated /* comment"),
    ("select (1, (2);\nselect 3;\n", "line 1, column 8", "unbalanced parenthesis"),
    ("select :'name';\n", "line 1, column 8", "pgbench does not replace :'name'"),
    ("\\startpipeline\nselect 1;\n", "line 1, column 1", "the pipeline is still open"),
    ("\\endpipeline\n", "line 1, column 1", "\\endpipeline outside a pipeline"),
    ("\\startpipeline\n\\startpipeline\n\\endpipeline\n", "line 2, column 1", "\\startpipeline inside a pipeline"),
    ("\\startpipeline\nselect 1 \\gset\n\\endpipeline\n", "line 2, column 1", "\\gset is not allowed in a pipeline"),
    ("\\", "line 1, column 1", "a backslash must start a meta-command"),
])
def test_script_errors_name_file_line_and_column(script, where, words):
    with pytest.raises(ScriptError) as err:
        parse_script(script, "my.sql")
    message = str(err.value)
    assert message.startswith(f"my.sql {where}: "), message
    assert words in message, message
    assert message.endswith(".") and message.count("\n") == 0
    line, column = where.removeprefix("line ").split(", column ")
    assert (err.value.line, err.value.column) == (int(line), int(column))


def test_an_empty_script_is_an_error():
    with pytest.raises(ScriptError, match="my.sql line 1: the script has no command"):
        parse_script("-- only a comment\n\n", "my.sql")


def test_defines_follow_pgbench():
    assert parse_define("aid=42") == ("aid", "42")
    assert parse_define("s=a=b") == ("s", "a=b")
    for bad in ("aid", "=1", "aid=", "1x=2"):
        with pytest.raises(ScriptError):
            parse_define(bad)


def test_a_missing_file_is_one_sentence(tmp_path):
    with pytest.raises(ScriptError, match=r"^cannot read the pgbench script .*nope\.sql: .*\.$"):
        read_script(tmp_path / "nope.sql")
    path = tmp_path / "ok.sql"
    path.write_text("select 1;\n")
    assert read_script(path).name == str(path)


def test_windows_line_ends_read_like_unix_ones():
    script = parse_script("\\set x 1 + 2\r\nselect :x;\r\n\\sleep 1 ms\r\n", "w.sql")
    assert [type(c).__name__ for c in script.commands] == ["SetCommand", "SqlCommand", "SleepCommand"]
    assert script.commands[1].line == 2 and script.commands[2].unit_us == 1000  # type: ignore[attr-defined]
