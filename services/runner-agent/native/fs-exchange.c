/*
 * fs-exchange: one Node-API function for the runner's file writes
 * (decision 0069).
 *
 *   exchange(dirfd, a, b) -> 0 | -errno
 *
 * renameat2(dirfd, a, dirfd, b, RENAME_EXCHANGE): the two names in one
 * directory (held by descriptor) swap their inodes atomically. The runner
 * writes a file under a temporary name and then exchanges it with the path:
 * readers of the path see the old file or the new one, never neither, and
 * ext4 does not force the new file's write-back as it does for a rename over
 * an existing name. a and b are single names (no '/', no NUL, at most
 * NAME_MAX bytes); anything else is -EINVAL or -ENAMETOOLONG, never a
 * truncated name.
 */
#define _GNU_SOURCE
#define NAPI_VERSION 8
#include <node_api.h>
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

/* Copies a JS string into buf as a single file name; 0 or -errno. */
static int name_arg(napi_env env, napi_value value, char *buf, size_t size) {
  size_t len = 0;
  napi_valuetype type;
  if (napi_typeof(env, value, &type) != napi_ok || type != napi_string) return -EINVAL;
  if (napi_get_value_string_utf8(env, value, NULL, 0, &len) != napi_ok) return -EINVAL;
  if (len == 0) return -EINVAL;
  if (len >= size) return -ENAMETOOLONG;
  if (napi_get_value_string_utf8(env, value, buf, size, &len) != napi_ok) return -EINVAL;
  /* An embedded NUL would name another file; a '/' another directory. */
  if (strlen(buf) != len || strchr(buf, '/') != NULL) return -EINVAL;
  if (strcmp(buf, ".") == 0 || strcmp(buf, "..") == 0) return -EINVAL;
  return 0;
}

static napi_value exchange(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  napi_value out;
  int32_t dirfd = -1;
  char a[NAME_MAX + 1];
  char b[NAME_MAX + 1];
  int result = -EINVAL;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) == napi_ok && argc == 3 &&
      napi_get_value_int32(env, argv[0], &dirfd) == napi_ok && dirfd >= 0) {
    result = name_arg(env, argv[1], a, sizeof a);
    if (result == 0) result = name_arg(env, argv[2], b, sizeof b);
    if (result == 0) result = syscall(SYS_renameat2, dirfd, a, dirfd, b, RENAME_EXCHANGE) == 0 ? 0 : -errno;
  }
  napi_create_int32(env, result, &out);
  return out;
}

NAPI_MODULE_INIT() {
  napi_value fn;
  if (napi_create_function(env, "exchange", NAPI_AUTO_LENGTH, exchange, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "exchange", fn) != napi_ok) return NULL;
  return exports;
}
