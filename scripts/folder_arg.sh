# shellcheck shell=sh
# folder_arg.sh: the checks of an option whose value is a folder, shared by scripts/gpu-check and
# scripts/install-deps (sourced; POSIX sh). The caller sets `tool` (its name, starting messages);
# each refusal is one line on the standard error and exit 2, before anything is made or run.
# shellcheck disable=SC2154 # tool: the caller's

# folder_arg OPTION [VALUE]: VALUE is given, not empty, and not an option (a folder whose name
# starts with '-' is written ./-x).
folder_arg() {
    case "${2-}" in
        "") echo "$tool: $1 needs a folder" >&2; exit 2 ;;
        -*) echo "$tool: $1 needs a folder, not the option '$2' (./$2 for a folder of that" \
                 "name)" >&2; exit 2 ;;
    esac
}

# folder_made OPTION DIR: DIR made where missing (mkdir -p) and then a folder this user can
# write into.
folder_made() {
    if ! mkdir -p -- "$2" 2>/dev/null || ! [ -d "$2" ] || ! [ -w "$2" ]; then
        echo "$tool: $1 $2: cannot make or write that folder" >&2
        exit 2
    fi
}
