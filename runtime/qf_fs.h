/* qf_fs.h: directories made on the way to a file, shared by the kernel cache (runtime/jit), the
 * generator's output (gen/gen_emit.c) and the tools' output files (runtime/tools/tool_file.c). */
#ifndef QF_FS_H
#define QF_FS_H

#include <stddef.h>
#include <sys/types.h>

#include "status.h" /* QF_INTERNAL */

/* mkdir -p: creates each missing directory of path, the last component included, with `mode`
 * (before the umask); a component that is already a directory is kept as it is, whatever its mode.
 * Returns 0 when path is then a directory, else an errno value: ENOTDIR when path or one of its
 * ancestors exists and is not a directory, EEXIST for a symbolic link to nothing, ENAMETOOLONG
 * past PATH_MAX, ENOENT for a ".." after a directory the call would make ("new/../x" would make
 * "new" and leave it behind), or mkdir(2)'s reason (EACCES, EROFS, ...). When failed_len is
 * not NULL it gets the length of the leading part of path that could not be made (all of path when the last
 * component failed), so that a message can name it. On failure the directories this call made
 * are removed again (all or nothing). Writability of the result is the caller's check. */
QF_INTERNAL int qf_mkdirs(const char *path, mode_t mode, size_t *failed_len);

/* Nonzero when qf_mkdirs' answer err for path, with failed_len as it set it, is its refusal of a
 * ".." after a directory it would have made (the failed part of path ends in that component), so
 * that a message can say so rather than strerror(ENOENT). */
QF_INTERNAL int qf_mkdirs_dotdot(int err, const char *path, size_t failed_len);

/* qf_mkdirs' answer err for path (failed_len as it set it) in words, for a message: "a symbolic
 * link to nothing" (EEXIST), "a '..' after a folder that does not exist yet" (qf_mkdirs_dotdot),
 * else strerror(err). One wording for the generator's and the kernel cache's messages. */
QF_INTERNAL const char *qf_mkdirs_why(int err, const char *path, size_t failed_len);

#endif /* QF_FS_H */
