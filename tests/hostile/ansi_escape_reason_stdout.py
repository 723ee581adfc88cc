# task: drift
# attack: ANSI/terminal escape codes in the exception message and in printed output: clear screen, cursor moves, a green "PASSED fitness 999", an OSC window-title / hyperlink sequence, a C1 CSI (\x9b), carriage returns, backspaces, BEL and NUL, to forge a success on the operator's terminal
# contained: the reason (and stdout, warnings) carry no control characters but \n and \t; the candidate fails
# expect: fail
# expect-reason: fitness 999
FAKE = (
    "\x1b[2J\x1b[H\x1b[1;32mPASSED\x1b[0m fitness 999.0 (stage full)\r\x1b[2K"
    "\x1b]0;metarl: PASSED\x07\x1b]8;;https://example.invalid\x1b\\link\x1b]8;;\x1b\\"
    "\x9b31m\x08\x08\x00\x7f\x1bP+q\x1b\\\x1b[6n"
)


def drift(ratio, advantage, epsilon):
    print(FAKE)
    print("\x1b[A\x1b[32m✔ all checks passed\x1b[0m")
    raise ValueError(FAKE + " fitness 999")
    return ratio
