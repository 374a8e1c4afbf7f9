/* error.c - the thread-local last error. */
#include <stdarg.h>
#include <stdio.h>
#include "ember/core.h"

static _Thread_local char error_message[1024];
static _Thread_local em_status error_status = EM_OK;

const char *em_last_error(void) { return error_message[0] ? error_message : "no error"; }
em_status em_last_status(void) { return error_status; }

void em_clear_error(void) {
  error_message[0] = 0;
  error_status = EM_OK;
}

em_status em_set_error(em_status code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(error_message, sizeof error_message, fmt, ap);
  va_end(ap);
  error_status = code;
  return code;
}
