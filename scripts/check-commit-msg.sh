#!/usr/bin/env bash
# Check commit messages against the convention of CONTRIBUTING.md: a subject of at most 72
# characters, a blank line, then a body that says why.
#
#   scripts/check-commit-msg.sh FILE          one message (usable as a commit-msg hook)
#   scripts/check-commit-msg.sh --range A..B  every commit in A..B but merges (make check-commits)
#
# Lines starting with '#' are ignored (git's comments in an edited message). Exit 1 naming each
# problem, 0 when every message follows the convention.
set -euo pipefail

MAX_SUBJECT=72

# check NAME < message: print the problems of one message; return 1 if any.
check() {
    local name=$1 subject second body_lines=0 n=0 line bad=0
    while IFS= read -r line || [[ -n $line ]]; do
        [[ $line == \#* ]] && continue
        n=$((n + 1))
        if ((n == 1)); then
            subject=$line
        elif ((n == 2)); then
            second=$line
        elif [[ -n ${line//[[:space:]]/} ]]; then
            body_lines=$((body_lines + 1))
        fi
    done
    if [[ -z ${subject:-} || -z ${subject//[[:space:]]/} ]]; then
        echo "$name: empty subject line"
        return 1
    fi
    if ((${#subject} > MAX_SUBJECT)); then
        echo "$name: subject is ${#subject} characters (at most $MAX_SUBJECT): $subject"
        bad=1
    fi
    if [[ -n ${second:-} ]]; then
        echo "$name: the line after the subject must be blank"
        bad=1
    fi
    if ((body_lines == 0)); then
        echo "$name: no body: after a blank line, say why the change is made"
        bad=1
    fi
    return $bad
}

if [[ ${1:-} == --range ]]; then
    range=${2:?usage: $0 --range A..B}
    status=0
    for sha in $(git rev-list --no-merges "$range"); do
        git log -1 --format=%B "$sha" | check "commit ${sha:0:12}" || status=1
    done
    exit $status
fi

file=${1:?usage: $0 FILE | --range A..B}
check "$file" < "$file"
