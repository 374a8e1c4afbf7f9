/* kernel_wire.c - the wire of `ember kernel` (a Jupyter kernel), as the Lua module
 * ember_kernel_wire that lua/ember/kernel/init.lua drives.
 *
 * What lives here is what must keep working while a cell's Lua code runs, so it runs on
 * its own thread (the "I/O thread"), which owns every Jupyter socket:
 *   - shell, control, stdin (ROUTER) and iopub (PUB) per the connection file, with every
 *     message signed and checked with HMAC-SHA256 (OpenSSL's libcrypto); a message whose
 *     signature does not match is logged and dropped, never handed to Lua;
 *   - the heartbeat (ROUTER, each message echoed back as it came);
 *   - the process's stdout and stderr: file descriptors 1 and 2 are pipes the I/O thread
 *     reads and publishes as `stream` messages (print, io.write, C printf, child processes);
 *   - interrupts: an interrupt_request on control sends SIGINT to the main thread, whose
 *     handler sets a Lua hook that raises "interrupted" in the running cell (as the REPL's
 *     Ctrl-C, bindings/ember/repl.c);
 *   - the parent watch: when the process that started the kernel is gone (we were
 *     re-parented, or JPY_PARENT_PID no longer exists), the kernel exits by itself.
 * The main thread (Lua) talks to the I/O thread over an inproc PAIR socket: verified
 * messages in, replies out. Message headers are made here (msg_id, session, date), so Lua
 * deals with msg_type and contents only. Before sending anything, the main thread flushes
 * stdio and the I/O thread drains the pipes: output printed by a cell always precedes its
 * result and its idle status. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <lua.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define DELIM "<IDS|MSG>"
#define PAIR_ENDPOINT "inproc://ember-kernel-requests"
#define CMD_ENDPOINT "inproc://ember-kernel-commands"
#define MAX_FRAMES 64
#define PIPE_CHUNK 65536
#define DIE_GRACE_MS 5000

enum { CH_SHELL, CH_CONTROL, CH_STDIN, CH_IOPUB, CH_HB, CH_COUNT };
static const char *channel_names[CH_COUNT] = {"shell", "control", "stdin", "iopub", "hb"};

/* A growable byte buffer (JSON text, frames). */
typedef struct buf {
  char *p;
  size_t n, cap;
} buf;

static int buf_put(buf *b, const void *s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p, b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
  return 0;
}

static int buf_str(buf *b, const char *s) { return buf_put(b, s, strlen(s)); }

/* The kernel: one per process. */
static struct {
  void *ctx;
  void *sock[CH_COUNT]; /* owned by the I/O thread once it runs */
  void *pair_main, *pair_io; /* requests: I/O thread -> Lua */
  void *cmd_main, *cmd_io; /* commands: Lua -> I/O thread (and the acknowledgement of "parent") */
  EVP_MAC *mac;
  unsigned char key[512];
  size_t key_len;
  char session[40], username[64];
  int out_pipe, err_pipe; /* read ends of the pipes that are now fds 1 and 2 */
  int saved_out, saved_err; /* the original fds 1 and 2: the log goes to saved_err */
  char carry[2][4]; /* an incomplete UTF-8 sequence held for the next read */
  int carry_n[2];
  char *parent; /* header of the request output belongs to (I/O thread) */
  pthread_t io_thread, main_thread;
  int started;
  pid_t ppid, jpy_parent;
} K = {.out_pipe = -1, .err_pipe = -1, .saved_out = -1, .saved_err = -1};

/* ---------------------------------------------------------------- interrupts */

static lua_State *volatile running; /* the state while a cell runs, else NULL */
static volatile sig_atomic_t interrupted; /* the hook fired since the last take_interrupt */

static void interrupt_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  lua_sethook(L, NULL, 0, 0);
  interrupted = 1;
  luaL_error(L, "interrupted");
}

static void on_sigint(int sig) {
  (void)sig;
  lua_State *L = running;
  if (L) lua_sethook(L, interrupt_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

/* ---------------------------------------------------------------- logging */

static void wire_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void wire_log(const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
  line[n++] = '\n';
  int fd = K.saved_err >= 0 ? K.saved_err : STDERR_FILENO;
  ssize_t ignored = write(fd, line, (size_t)n);
  (void)ignored;
}

/* ---------------------------------------------------------------- signatures, headers */

/* Lower-case hex HMAC-SHA256 of the four frames into out[65]; "" when there is no key. */
static int sign(const zmq_msg_t *parts[4], char out[65]) {
  out[0] = 0;
  if (K.key_len == 0) return 0;
  EVP_MAC_CTX *c = EVP_MAC_CTX_new(K.mac);
  if (!c) return -1;
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA256", 0),
                         OSSL_PARAM_construct_end()};
  unsigned char md[EVP_MAX_MD_SIZE];
  size_t md_len = 0;
  int ok = EVP_MAC_init(c, K.key, K.key_len, params);
  for (int i = 0; ok && i < 4; i++) ok = EVP_MAC_update(c, zmq_msg_data((zmq_msg_t *)parts[i]), zmq_msg_size(parts[i]));
  ok = ok && EVP_MAC_final(c, md, &md_len, sizeof md);
  EVP_MAC_CTX_free(c);
  if (!ok || md_len != 32) return -1;
  for (size_t i = 0; i < md_len; i++) snprintf(out + 2 * i, 3, "%02x", md[i]);
  return 0;
}

static void uuid4(char out[33]) {
  unsigned char r[16];
  if (RAND_bytes(r, sizeof r) != 1) {
    for (int i = 0; i < 16; i++) r[i] = (unsigned char)rand();
  }
  r[6] = (unsigned char)((r[6] & 0x0f) | 0x40);
  r[8] = (unsigned char)((r[8] & 0x3f) | 0x80);
  for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", r[i]);
}

/* JSON string text of s (n bytes): quotes, escapes, and invalid UTF-8 replaced by U+FFFD. */
static int json_string(buf *b, const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  int rc = buf_put(b, "\"", 1);
  for (size_t i = 0; i < n && rc == 0;) {
    unsigned c = u[i];
    if (c < 0x80) {
      char esc[8];
      if (c == '"' || c == '\\') esc[0] = '\\', esc[1] = (char)c, esc[2] = 0;
      else if (c == '\n') strcpy(esc, "\\n");
      else if (c == '\t') strcpy(esc, "\\t");
      else if (c == '\r') strcpy(esc, "\\r");
      else if (c < 0x20 || c == 0x7f) snprintf(esc, sizeof esc, "\\u%04x", c);
      else esc[0] = (char)c, esc[1] = 0;
      rc = buf_str(b, esc);
      i++;
      continue;
    }
    size_t len = c >= 0xf0 && c < 0xf5 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
    int valid = len > 0 && i + len <= n;
    for (size_t k = 1; valid && k < len; k++) valid = (u[i + k] & 0xc0) == 0x80;
    if (valid && len == 3) valid = !(c == 0xe0 && u[i + 1] < 0xa0) && !(c == 0xed && u[i + 1] >= 0xa0);
    if (valid && len == 4) valid = !(c == 0xf0 && u[i + 1] < 0x90) && !(c == 0xf4 && u[i + 1] >= 0x90);
    if (valid) {
      rc = buf_put(b, s + i, len);
      i += len;
    } else {
      rc = buf_str(b, "\xef\xbf\xbd");
      i++;
    }
  }
  return rc ? rc : buf_put(b, "\"", 1);
}

static void make_header(buf *b, const char *msg_type) {
  char id[33], date[48];
  uuid4(id);
  struct timeval tv;
  gettimeofday(&tv, NULL);
  struct tm tm;
  gmtime_r(&tv.tv_sec, &tm);
  size_t n = strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(date + n, sizeof date - n, ".%06ldZ", (long)tv.tv_usec);
  buf_str(b, "{\"msg_id\":\"");
  buf_str(b, id);
  buf_str(b, "\",\"session\":\"");
  buf_str(b, K.session);
  buf_str(b, "\",\"username\":");
  json_string(b, K.username, strlen(K.username));
  buf_str(b, ",\"date\":\"");
  buf_str(b, date);
  buf_str(b, "\",\"msg_type\":");
  json_string(b, msg_type, strlen(msg_type));
  buf_str(b, ",\"version\":\"5.3\"}");
}

/* ---------------------------------------------------------------- sending (I/O thread) */

static int send_frame(void *s, const void *p, size_t n, int more) {
  return zmq_send(s, p, n, more ? ZMQ_SNDMORE : 0) < 0 ? -1 : 0;
}

/* Signs and sends one message: idents (n_idents frames), delimiter, signature, the four
 * JSON frames. */
static void send_message(int ch, zmq_msg_t *idents, int n_idents, const char *msg_type, const char *parent,
                         size_t parent_n, const char *metadata, size_t metadata_n, const char *content,
                         size_t content_n) {
  buf header = {0};
  make_header(&header, msg_type);
  if (!header.p) return;
  zmq_msg_t parts[4];
  zmq_msg_init_data(&parts[0], header.p, header.n, NULL, NULL);
  zmq_msg_init_data(&parts[1], (void *)parent, parent_n, NULL, NULL);
  zmq_msg_init_data(&parts[2], (void *)metadata, metadata_n, NULL, NULL);
  zmq_msg_init_data(&parts[3], (void *)content, content_n, NULL, NULL);
  const zmq_msg_t *signed_parts[4] = {&parts[0], &parts[1], &parts[2], &parts[3]};
  char sig[65];
  if (sign(signed_parts, sig)) {
    wire_log("ember kernel: cannot sign a %s message (libcrypto failed)", msg_type);
  } else {
    void *s = K.sock[ch];
    int rc = 0;
    if (ch == CH_IOPUB) rc |= send_frame(s, msg_type, strlen(msg_type), 1); /* the topic */
    for (int i = 0; i < n_idents; i++) rc |= send_frame(s, zmq_msg_data(&idents[i]), zmq_msg_size(&idents[i]), 1);
    rc |= send_frame(s, DELIM, strlen(DELIM), 1);
    rc |= send_frame(s, sig, strlen(sig), 1);
    rc |= send_frame(s, header.p, header.n, 1);
    rc |= send_frame(s, parent, parent_n, 1);
    rc |= send_frame(s, metadata, metadata_n, 1);
    rc |= send_frame(s, content, content_n, 0);
    if (rc)
      wire_log("ember kernel: sending a %s message on %s failed: %s", msg_type, channel_names[ch],
               zmq_strerror(zmq_errno()));
  }
  for (int i = 0; i < 4; i++) zmq_msg_close(&parts[i]);
  free(header.p);
}

/* Publishes n bytes of fd 1 (which = 0) or 2 (which = 1) as a stream message; an incomplete
 * UTF-8 sequence at the end waits for the next chunk. */
static void publish_stream(int which, const char *data, size_t n) {
  char joined[PIPE_CHUNK + 4];
  size_t len = 0;
  memcpy(joined, K.carry[which], (size_t)K.carry_n[which]);
  len = (size_t)K.carry_n[which];
  memcpy(joined + len, data, n);
  len += n;
  K.carry_n[which] = 0;
  /* hold back the start of a multi-byte sequence cut by the read */
  size_t back = 0;
  while (back < 3 && back < len && (joined[len - 1 - back] & 0xc0) == 0x80) back++;
  if (back < len) {
    unsigned char lead = (unsigned char)joined[len - 1 - back];
    size_t need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
    if (need > back + 1 && need <= 4) {
      K.carry_n[which] = (int)(back + 1);
      memcpy(K.carry[which], joined + len - 1 - back, back + 1);
      len -= back + 1;
    }
  }
  if (len == 0) return;
  buf content = {0};
  buf_str(&content, which ? "{\"name\":\"stderr\",\"text\":" : "{\"name\":\"stdout\",\"text\":");
  json_string(&content, joined, len);
  buf_str(&content, "}");
  const char *parent = K.parent ? K.parent : "{}";
  if (content.p) send_message(CH_IOPUB, NULL, 0, "stream", parent, strlen(parent), "{}", 2, content.p, content.n);
  free(content.p);
}

/* Reads whatever the pipes hold now (they are non-blocking) and publishes it. */
static void drain_pipes(void) {
  static char chunk[PIPE_CHUNK];
  int fds[2] = {K.out_pipe, K.err_pipe};
  for (int which = 0; which < 2; which++) {
    if (fds[which] < 0) continue;
    for (;;) {
      ssize_t n = read(fds[which], chunk, sizeof chunk);
      if (n > 0) publish_stream(which, chunk, (size_t)n);
      if (n < (ssize_t)sizeof chunk) break;
    }
  }
}

/* ---------------------------------------------------------------- receiving (I/O thread) */

/* Receives every frame of one message, keeping the first max; returns how many there were
 * (more than max: the caller refuses the message). */
static int recv_all(void *s, zmq_msg_t *frames, int max) {
  int n = 0, more = 1;
  while (more) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, s, 0) < 0) {
      zmq_msg_close(&m);
      break;
    }
    more = zmq_msg_more(&m);
    if (n < max) frames[n] = m;
    else zmq_msg_close(&m);
    n++;
  }
  return n;
}

static void close_all(zmq_msg_t *frames, int n) {
  if (n > MAX_FRAMES) n = MAX_FRAMES;
  for (int i = 0; i < n; i++) zmq_msg_close(&frames[i]);
}

/* The value of "msg_type" in a header, copied into out (a header never nests objects). */
static void header_msg_type(const zmq_msg_t *header, char *out, size_t n) {
  out[0] = 0;
  size_t len = zmq_msg_size(header);
  const char *h = zmq_msg_data((zmq_msg_t *)header), *end = h + len;
  static const char key[] = "\"msg_type\"";
  for (const char *p = h; p + sizeof key - 1 <= end; p++) {
    if (memcmp(p, key, sizeof key - 1)) continue;
    p += sizeof key - 1;
    while (p < end && (*p == ' ' || *p == ':' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    if (p >= end || *p != '"') return;
    p++;
    size_t k = 0;
    while (p < end && *p != '"' && k + 1 < n) out[k++] = *p++;
    out[k] = 0;
    return;
  }
}

/* A message from a client: checked, then handed to Lua as
 * [channel, n_idents, idents..., header, parent, metadata, content, buffers...]. */
static void forward_request(int ch) {
  zmq_msg_t f[MAX_FRAMES];
  int n = recv_all(K.sock[ch], f, MAX_FRAMES);
  int d = 0;
  while (d < n && d < MAX_FRAMES &&
         !(zmq_msg_size(&f[d]) == strlen(DELIM) && !memcmp(zmq_msg_data(&f[d]), DELIM, strlen(DELIM))))
    d++;
  if (n > MAX_FRAMES || d + 6 > n) {
    wire_log("ember kernel: refused a malformed message on %s (%d frames, no '%s' followed by 5 frames)",
             channel_names[ch], n, DELIM);
    close_all(f, n);
    return;
  }
  const zmq_msg_t *parts[4] = {&f[d + 2], &f[d + 3], &f[d + 4], &f[d + 5]};
  char expected[65];
  size_t got_n = zmq_msg_size(&f[d + 1]);
  int ok = sign(parts, expected) == 0 && got_n == strlen(expected) &&
           CRYPTO_memcmp(expected, zmq_msg_data(&f[d + 1]), got_n) == 0;
  if (!ok) {
    wire_log("ember kernel: refused a message with a bad signature on %s", channel_names[ch]);
    close_all(f, n);
    return;
  }
  char msg_type[64];
  header_msg_type(&f[d + 2], msg_type, sizeof msg_type);
  if (ch == CH_CONTROL && !strcmp(msg_type, "interrupt_request")) pthread_kill(K.main_thread, SIGINT);
  char count[16];
  snprintf(count, sizeof count, "%d", d);
  const char *name = channel_names[ch];
  int rc = send_frame(K.pair_io, name, strlen(name), 1) | send_frame(K.pair_io, count, strlen(count), 1);
  for (int i = 0; i < n; i++) {
    if (i == d || i == d + 1) continue; /* the delimiter and signature stay here */
    rc |= send_frame(K.pair_io, zmq_msg_data(&f[i]), zmq_msg_size(&f[i]), i + 1 < n);
  }
  if (rc) wire_log("ember kernel: cannot hand a %s message to Lua: %s", msg_type, zmq_strerror(zmq_errno()));
  close_all(f, n);
}

static void echo_heartbeat(void) {
  zmq_msg_t f[MAX_FRAMES];
  int n = recv_all(K.sock[CH_HB], f, MAX_FRAMES);
  if (n > MAX_FRAMES) n = MAX_FRAMES;
  for (int i = 0; i < n; i++) send_frame(K.sock[CH_HB], zmq_msg_data(&f[i]), zmq_msg_size(&f[i]), i + 1 < n);
  close_all(f, n);
}

/* A command from Lua: ["send", channel, msg_type, parent, metadata, content, idents...],
 * ["parent", header] or ["stop"]. Returns 1 on stop. "parent" is acknowledged: Lua waits
 * for it, so that what a cell prints is never read before its parent is known here. */
static int handle_command(void) {
  zmq_msg_t f[MAX_FRAMES];
  int n = recv_all(K.cmd_io, f, MAX_FRAMES);
  if (n > MAX_FRAMES) n = MAX_FRAMES;
  drain_pipes(); /* what the cell printed before this goes out first */
  int stop = 0;
  const char *cmd = n > 0 ? zmq_msg_data(&f[0]) : "";
  size_t cmd_n = n > 0 ? zmq_msg_size(&f[0]) : 0;
  if (cmd_n == 4 && !memcmp(cmd, "stop", 4)) {
    stop = 1;
  } else if (cmd_n == 6 && !memcmp(cmd, "parent", 6) && n == 2) {
    free(K.parent);
    K.parent = strndup(zmq_msg_data(&f[1]), zmq_msg_size(&f[1]));
    send_frame(K.cmd_io, "ack", 3, 0);
  } else if (cmd_n == 4 && !memcmp(cmd, "send", 4) && n >= 6) {
    int ch = *(const char *)zmq_msg_data(&f[1]) - '0';
    char msg_type[64];
    size_t tn = zmq_msg_size(&f[2]) < sizeof msg_type - 1 ? zmq_msg_size(&f[2]) : sizeof msg_type - 1;
    memcpy(msg_type, zmq_msg_data(&f[2]), tn);
    msg_type[tn] = 0;
    if (ch >= 0 && ch < CH_HB)
      send_message(ch, &f[6], n - 6, msg_type, zmq_msg_data(&f[3]), zmq_msg_size(&f[3]), zmq_msg_data(&f[4]),
                   zmq_msg_size(&f[4]), zmq_msg_data(&f[5]), zmq_msg_size(&f[5]));
  }
  close_all(f, n);
  return stop;
}

static int commands_waiting(void) {
  int events = 0;
  size_t len = sizeof events;
  return zmq_getsockopt(K.cmd_io, ZMQ_EVENTS, &events, &len) == 0 && (events & ZMQ_POLLIN);
}

static int parent_gone(void) {
  if (K.ppid > 1 && getppid() != K.ppid) return 1;
  return K.jpy_parent > 0 && kill(K.jpy_parent, 0) != 0 && errno == ESRCH;
}

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *io_main(void *arg) {
  (void)arg;
  long long died_at = 0;
  for (;;) {
    zmq_pollitem_t items[8];
    int k = 0;
    for (int ch = 0; ch < CH_COUNT; ch++) {
      if (ch == CH_IOPUB) continue;
      items[k++] = (zmq_pollitem_t){.socket = K.sock[ch], .events = ZMQ_POLLIN};
    }
    items[k++] = (zmq_pollitem_t){.socket = K.cmd_io, .events = ZMQ_POLLIN};
    items[k++] = (zmq_pollitem_t){.fd = K.out_pipe, .events = ZMQ_POLLIN};
    items[k++] = (zmq_pollitem_t){.fd = K.err_pipe, .events = ZMQ_POLLIN};
    int rc = zmq_poll(items, k, 500);
    if (rc < 0 && zmq_errno() == ETERM) break;
    if (rc > 0) {
      int i = 0;
      for (int ch = 0; ch < CH_COUNT; ch++) {
        if (ch == CH_IOPUB) continue;
        if (items[i++].revents & ZMQ_POLLIN) {
          if (ch == CH_HB) echo_heartbeat();
          else forward_request(ch);
        }
      }
      /* every command Lua sent before the output now in the pipes goes first (busy,
       * execute_input before the cell's output) */
      int stop = 0;
      while (!stop && commands_waiting()) stop = handle_command();
      if (stop) break;
      if (items[i + 1].revents & ZMQ_POLLIN || items[i + 2].revents & ZMQ_POLLIN) drain_pipes();
    }
    if (!died_at && parent_gone()) {
      wire_log("ember kernel: the process that started this kernel is gone: exiting");
      died_at = now_ms();
      send_frame(K.pair_io, "parent_died", 11, 0);
      pthread_kill(K.main_thread, SIGINT);
    }
    if (died_at && now_ms() - died_at > DIE_GRACE_MS) _exit(1); /* Lua is stuck in a C call */
  }
  drain_pipes();
  return NULL;
}

/* ---------------------------------------------------------------- setup */

static int bind_channel(lua_State *L, int ch, int type, const char *transport, const char *ip, int port) {
  void *s = zmq_socket(K.ctx, type);
  if (!s) return luaL_error(L, "kernel: cannot make the %s socket: %s", channel_names[ch], zmq_strerror(zmq_errno()));
  int linger = 1000;
  zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
  if (type == ZMQ_ROUTER) {
    int on = 1; /* a reply to a client that is gone fails rather than blocking */
    zmq_setsockopt(s, ZMQ_ROUTER_HANDOVER, &on, sizeof on);
  }
  char endpoint[512];
  if (!strcmp(transport, "ipc")) snprintf(endpoint, sizeof endpoint, "ipc://%s-%d", ip, port);
  else if (port > 0) snprintf(endpoint, sizeof endpoint, "%s://%s:%d", transport, ip, port);
  else snprintf(endpoint, sizeof endpoint, "%s://%s:*", transport, ip);
  if (zmq_bind(s, endpoint) != 0) {
    int e = zmq_errno();
    zmq_close(s);
    return luaL_error(L, "kernel: cannot bind the %s channel to %s: %s", channel_names[ch], endpoint, zmq_strerror(e));
  }
  K.sock[ch] = s;
  if (port == 0 && strcmp(transport, "ipc")) { /* report the port the system chose */
    char last[512];
    size_t len = sizeof last;
    zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, last, &len);
    const char *colon = strrchr(last, ':');
    port = colon ? atoi(colon + 1) : 0;
  }
  return port;
}

static int field_int(lua_State *L, int t, const char *name) {
  lua_getfield(L, t, name);
  int v = lua_isnumber(L, -1) ? (int)lua_tointeger(L, -1) : 0;
  lua_pop(L, 1);
  return v;
}

static const char *field_str(lua_State *L, int t, const char *name, const char *dflt) {
  lua_getfield(L, t, name);
  const char *v = lua_isstring(L, -1) ? lua_tostring(L, -1) : dflt;
  lua_pop(L, 1); /* the string stays alive in the table */
  return v;
}

/* fd (1 or 2) becomes the write end of a pipe; returns the read end, non-blocking. */
static int capture_fd(int fd, int *saved) {
  int p[2];
  if (pipe2(p, O_CLOEXEC)) return -1;
  *saved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  if (*saved < 0 || dup2(p[1], fd) < 0) {
    close(p[0]), close(p[1]);
    return -1;
  }
  close(p[1]);
  fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_NONBLOCK);
  return p[0];
}

/* wire.start{transport=, ip=, key=, signature_scheme=, shell_port=, ...}: binds the five
 * channels, captures stdout/stderr, starts the I/O thread; returns {shell_port=, ...}. */
static int l_start(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  if (K.started) return luaL_error(L, "kernel: the wire is already started");
  const char *transport = field_str(L, 1, "transport", "tcp"), *ip = field_str(L, 1, "ip", "127.0.0.1");
  const char *scheme = field_str(L, 1, "signature_scheme", "hmac-sha256");
  size_t key_len = 0;
  lua_getfield(L, 1, "key");
  const char *key = lua_isstring(L, -1) ? lua_tolstring(L, -1, &key_len) : "";
  lua_pop(L, 1);
  if (strcmp(transport, "tcp") && strcmp(transport, "ipc"))
    return luaL_error(L, "kernel: transport '%s' is not supported (expected tcp or ipc)", transport);
  if (key_len && strcmp(scheme, "hmac-sha256"))
    return luaL_error(L, "kernel: signature_scheme '%s' is not supported (expected hmac-sha256)", scheme);
  if (key_len > sizeof K.key)
    return luaL_error(L, "kernel: the key is %d bytes, at most %d are supported", (int)key_len, (int)sizeof K.key);
  memcpy(K.key, key, key_len);
  K.key_len = key_len;
  K.mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
  if (!K.mac) return luaL_error(L, "kernel: libcrypto has no HMAC");
  char id[33];
  uuid4(id);
  snprintf(K.session, sizeof K.session, "%s", id);
  struct passwd *pw = getpwuid(getuid());
  snprintf(K.username, sizeof K.username, "%s", pw && pw->pw_name ? pw->pw_name : "ember");

  /* ZeroMQ's threads and ours never take SIGINT: it is for the thread running Lua */
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  K.ctx = zmq_ctx_new();
  static const char *ports[CH_COUNT] = {"shell_port", "control_port", "stdin_port", "iopub_port", "hb_port"};
  static const int types[CH_COUNT] = {ZMQ_ROUTER, ZMQ_ROUTER, ZMQ_ROUTER, ZMQ_PUB, ZMQ_ROUTER};
  lua_newtable(L);
  for (int ch = 0; ch < CH_COUNT; ch++) {
    int port = bind_channel(L, ch, types[ch], transport, ip, field_int(L, 1, ports[ch]));
    lua_pushinteger(L, port);
    lua_setfield(L, -2, ports[ch]);
  }
  K.pair_main = zmq_socket(K.ctx, ZMQ_PAIR);
  K.pair_io = zmq_socket(K.ctx, ZMQ_PAIR);
  zmq_bind(K.pair_io, PAIR_ENDPOINT);
  zmq_connect(K.pair_main, PAIR_ENDPOINT);
  K.cmd_main = zmq_socket(K.ctx, ZMQ_PAIR);
  K.cmd_io = zmq_socket(K.ctx, ZMQ_PAIR);
  zmq_bind(K.cmd_io, CMD_ENDPOINT);
  zmq_connect(K.cmd_main, CMD_ENDPOINT);

  fflush(stdout);
  fflush(stderr);
  K.out_pipe = capture_fd(STDOUT_FILENO, &K.saved_out);
  K.err_pipe = capture_fd(STDERR_FILENO, &K.saved_err);
  setvbuf(stdout, NULL, _IOLBF, 0); /* a pipe now: lines go out as a cell prints them */

  K.main_thread = pthread_self();
  K.ppid = getppid();
  const char *jpy = getenv("JPY_PARENT_PID");
  K.jpy_parent = jpy ? (pid_t)atoi(jpy) : 0;
  int rc = pthread_create(&K.io_thread, NULL, io_main, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc) return luaL_error(L, "kernel: cannot start the I/O thread: %s", strerror(rc));
  K.started = 1;

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, NULL);
  return 1;
}

/* ---------------------------------------------------------------- the main thread's side */

static int channel_index(lua_State *L, int arg) {
  const char *name = luaL_checkstring(L, arg);
  for (int ch = 0; ch < CH_HB; ch++)
    if (!strcmp(name, channel_names[ch])) return ch;
  return luaL_error(L, "kernel: unknown channel '%s' (expected shell, control, stdin or iopub)", name);
}

static void need_started(lua_State *L) {
  if (!K.started) luaL_error(L, "kernel: the wire is not started (wire.start first)");
}

/* wire.send(channel, msg_type, parent_json, metadata_json, content_json [, idents]) */
static int l_send(lua_State *L) {
  need_started(L);
  int ch = channel_index(L, 1);
  size_t len[4];
  const char *s[4];
  for (int i = 0; i < 4; i++) s[i] = luaL_checklstring(L, 2 + i, &len[i]);
  fflush(stdout);
  fflush(stderr);
  char c = (char)('0' + ch);
  int n_idents = lua_istable(L, 6) ? (int)lua_objlen(L, 6) : 0;
  if (n_idents > MAX_FRAMES - 6) return luaL_error(L, "kernel: %d identities, at most %d", n_idents, MAX_FRAMES - 6);
  int rc = send_frame(K.cmd_main, "send", 4, 1) | send_frame(K.cmd_main, &c, 1, 1);
  for (int i = 0; i < 4; i++) rc |= send_frame(K.cmd_main, s[i], len[i], i < 3 || n_idents > 0);
  for (int i = 1; i <= n_idents; i++) {
    lua_rawgeti(L, 6, i);
    size_t n;
    const char *id = luaL_checklstring(L, -1, &n);
    rc |= send_frame(K.cmd_main, id, n, i < n_idents);
    lua_pop(L, 1);
  }
  if (rc) return luaL_error(L, "kernel: cannot send: %s", zmq_strerror(zmq_errno()));
  return 0;
}

/* wire.set_parent(header_json): the request that output printed from now on belongs to. */
static int l_set_parent(lua_State *L) {
  need_started(L);
  size_t n;
  const char *h = luaL_checklstring(L, 1, &n);
  fflush(stdout);
  fflush(stderr);
  char ack[4];
  if (send_frame(K.cmd_main, "parent", 6, 1) || send_frame(K.cmd_main, h, n, 0) ||
      zmq_recv(K.cmd_main, ack, sizeof ack, 0) < 0)
    return luaL_error(L, "kernel: cannot set the parent: %s", zmq_strerror(zmq_errno()));
  return 0;
}

/* wire.recv(timeout_ms) -> {channel=, idents={}, header=, parent_header=, metadata=,
 * content=, buffers={}} (JSON texts), or {channel='parent_died'}, or nil on timeout. */
static int l_recv(lua_State *L) {
  need_started(L);
  int timeout = (int)luaL_optinteger(L, 1, -1);
  zmq_pollitem_t item = {.socket = K.pair_main, .events = ZMQ_POLLIN};
  int rc;
  do rc = zmq_poll(&item, 1, timeout);
  while (rc < 0 && zmq_errno() == EINTR && timeout < 0);
  if (rc <= 0) return 0;
  zmq_msg_t f[MAX_FRAMES];
  int n = recv_all(K.pair_main, f, MAX_FRAMES);
  if (n > MAX_FRAMES) n = MAX_FRAMES;
  lua_createtable(L, 0, 8);
  lua_pushlstring(L, zmq_msg_data(&f[0]), zmq_msg_size(&f[0]));
  lua_setfield(L, -2, "channel");
  if (n >= 2) {
    char count[16] = {0};
    memcpy(count, zmq_msg_data(&f[1]), zmq_msg_size(&f[1]) < 15 ? zmq_msg_size(&f[1]) : 15);
    int d = atoi(count);
    lua_createtable(L, d, 0);
    for (int i = 0; i < d && 2 + i < n; i++) {
      lua_pushlstring(L, zmq_msg_data(&f[2 + i]), zmq_msg_size(&f[2 + i]));
      lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "idents");
    static const char *names[4] = {"header", "parent_header", "metadata", "content"};
    for (int i = 0; i < 4 && 2 + d + i < n; i++) {
      lua_pushlstring(L, zmq_msg_data(&f[2 + d + i]), zmq_msg_size(&f[2 + d + i]));
      lua_setfield(L, -2, names[i]);
    }
    lua_newtable(L);
    for (int i = 2 + d + 4; i < n; i++) {
      lua_pushlstring(L, zmq_msg_data(&f[i]), zmq_msg_size(&f[i]));
      lua_rawseti(L, -2, i - (2 + d + 4) + 1);
    }
    lua_setfield(L, -2, "buffers");
  }
  close_all(f, n);
  return 1;
}

/* wire.executing(true|false): a cell starts or ends running; SIGINT interrupts it only then. */
static int l_executing(lua_State *L) {
  if (lua_toboolean(L, 1)) {
    interrupted = 0;
    running = L;
  } else {
    running = NULL;
    lua_sethook(L, NULL, 0, 0); /* an interrupt that came too late for the hook */
  }
  return 0;
}

/* wire.take_interrupt() -> true once after the interrupt hook stopped a cell. */
static int l_take_interrupt(lua_State *L) {
  lua_pushboolean(L, interrupted);
  interrupted = 0;
  return 1;
}

static int l_log(lua_State *L) {
  wire_log("%s", luaL_checkstring(L, 1));
  return 0;
}

/* wire.stop(): stops the I/O thread (after it sent what is queued), restores fds 1 and 2. */
static int l_stop(lua_State *L) {
  (void)L;
  if (!K.started) return 0;
  fflush(stdout);
  fflush(stderr);
  send_frame(K.cmd_main, "stop", 4, 0);
  pthread_join(K.io_thread, NULL);
  dup2(K.saved_out, STDOUT_FILENO);
  dup2(K.saved_err, STDERR_FILENO);
  int fds[4] = {K.out_pipe, K.err_pipe, K.saved_out, K.saved_err};
  for (int i = 0; i < 4; i++)
    if (fds[i] >= 0) close(fds[i]);
  K.out_pipe = K.err_pipe = K.saved_out = K.saved_err = -1;
  for (int ch = 0; ch < CH_COUNT; ch++) zmq_close(K.sock[ch]);
  zmq_close(K.pair_main);
  zmq_close(K.pair_io);
  zmq_close(K.cmd_main);
  zmq_close(K.cmd_io);
  zmq_ctx_term(K.ctx);
  EVP_MAC_free(K.mac);
  free(K.parent);
  K.parent = NULL;
  K.started = 0;
  signal(SIGINT, SIG_DFL);
  return 0;
}

int luaopen_ember_kernel_wire(lua_State *L) {
  static const luaL_Reg fns[] = {{"start", l_start}, {"send", l_send},           {"set_parent", l_set_parent},
                                 {"recv", l_recv},   {"executing", l_executing}, {"take_interrupt", l_take_interrupt},
                                 {"log", l_log},     {"stop", l_stop},           {NULL, NULL}};
  lua_newtable(L);
  luaL_register(L, NULL, fns);
  return 1;
}
