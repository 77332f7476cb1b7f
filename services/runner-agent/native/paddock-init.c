/*
 * paddock-init: pid 1 of a session's exec namespace (decision 0050).
 *
 * The runner starts it once per sandbox through the launch chain (the
 * session's uid, cgroups, rlimits, network and mounts; bwrap --as-pid-1), and
 * then asks it, over its stdin and stdout, to fork the session's exec'd
 * commands: a fork of this small static process costs well under a
 * millisecond, where a launch of its own costs tens.
 *
 * Frames both ways: type (1 byte), id (u32 LE), length (u32 LE), payload.
 *   runner -> init
 *     'S' start:  u32 argc, u32 envc, then argc + envc + 1 NUL-terminated
 *                 strings: argv, env ("NAME=value"), cwd
 *     'I' stdin:  bytes for the command's stdin; an empty payload closes it
 *                 once what is queued was written
 *     'K' signal: u32 signal number, sent to the command's process group
 *     'Z' pause:  u8 1 stops reading the command's output, 0 resumes it
 *     'T' tunnel: u32 port: a TCP connection to the port on the sandbox's
 *                 loopback (127.0.0.1, then ::1), made from inside its
 *                 network namespace as the session's user; its bytes go as a
 *                 command's do (stdin frames in, stdout frames out), 'K'
 *                 aborts it, its exit status is 0 once both directions ended
 *                 or errno << 8 when it could not connect
 *   init -> runner
 *     'P' started: u32 pid (as the namespace sees it)
 *     'O' / 'E'    stdout / stderr bytes
 *     'W' written: u32 bytes of stdin the command was given
 *     'C' closed:  the command closed its stdin; what was queued is dropped
 *     'D' drained: a tunnel's peer sent its last byte (or the connection broke)
 *     'X' exit:    i32 wait status; nothing of that id follows
 *
 * It trusts only its stdin (a pipe from the runner: the session cannot open
 * it, this process being non-dumpable) and answers only on its stdout. When
 * its stdin closes (the runner went away or let the sandbox go) it kills
 * every process of the namespace and exits, which ends the namespace.
 * A command's exit is reported once the command (its first process) exited
 * and what it had written before was read: what stays behind in its process
 * group (a background job) lives on with the session, its later output
 * dropped.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_EXECS 512
#define MAX_FRAME (4u << 20)
#define HEADER 9
#define READ_CHUNK 65536
/* Output waiting for the runner past which commands' pipes are not read (backpressure). */
#define OUT_HIGH (1u << 20)

struct buf {
  char *data;
  size_t len, cap, off;
};

struct exec {
  uint32_t id;
  pid_t pid;
  int fd_in, fd_out, fd_err;
  int paused, exited, status, close_in;
  /* Bytes each output pipe held when the command exited: read those, then report the exit. */
  int left_out, left_err;
  struct buf in;
  /* A tunnel (no process: pid 0, never signalled): the port, the address family tried, connect under way. */
  int tunnel, port, family, connecting;
};

static struct exec execs[MAX_EXECS];
static int nexecs;
static struct buf from_runner, to_runner;
static int control_open = 1;

/*
 * Every process of the namespace: only as its pid 1 (kill(-1) anywhere else
 * would reach every process the caller may signal on the host).
 */
static void kill_namespace(void) {
  if (getpid() == 1) kill(-1, SIGKILL);
}

static void die(const char *why) {
  dprintf(2, "paddock-init: %s\n", why);
  kill_namespace();
  _exit(2);
}

static void reserve(struct buf *b, size_t more) {
  if (b->off > 0 && b->off == b->len) b->off = b->len = 0;
  if (b->len + more <= b->cap) return;
  if (b->off > 0) {
    memmove(b->data, b->data + b->off, b->len - b->off);
    b->len -= b->off;
    b->off = 0;
    if (b->len + more <= b->cap) return;
  }
  size_t cap = b->cap ? b->cap : 65536;
  while (cap < b->len + more) cap *= 2;
  char *data = realloc(b->data, cap);
  if (!data) die("out of memory");
  b->data = data;
  b->cap = cap;
}

static void put_u32(char *p, uint32_t v) {
  p[0] = (char)(v & 0xff);
  p[1] = (char)((v >> 8) & 0xff);
  p[2] = (char)((v >> 16) & 0xff);
  p[3] = (char)((v >> 24) & 0xff);
}

static uint32_t get_u32(const char *p) {
  const unsigned char *u = (const unsigned char *)p;
  return (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 | (uint32_t)u[3] << 24;
}

static void send_frame(char type, uint32_t id, const void *payload, uint32_t len) {
  reserve(&to_runner, HEADER + len);
  char *p = to_runner.data + to_runner.len;
  p[0] = type;
  put_u32(p + 1, id);
  put_u32(p + 5, len);
  if (len) memcpy(p + HEADER, payload, len);
  to_runner.len += HEADER + len;
}

static void send_u32(char type, uint32_t id, uint32_t v) {
  char p[4];
  put_u32(p, v);
  send_frame(type, id, p, 4);
}

static struct exec *find(uint32_t id) {
  for (int i = 0; i < nexecs; i++)
    if (execs[i].id == id) return &execs[i];
  return NULL;
}

static void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

static void set_nonblock(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* In the child: stdio from the pipes, nothing else open, default signals, then exec. */
static void exec_child(int in, int out, int err, char **argv, char **envp, const char *cwd) {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  signal(SIGPIPE, SIG_DFL);
  /* Its own process group, which the parent sets too (see start): whichever runs first makes it. */
  setpgid(0, 0);
  if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) _exit(126);
  if (syscall(SYS_close_range, 3, ~0U, 0) != 0)
    for (int fd = 3; fd < 4096; fd++) close(fd);
  if (chdir(cwd) != 0) {
    dprintf(2, "paddock: cannot enter %s: %s\n", cwd, strerror(errno));
    _exit(126);
  }
  execvpe(argv[0], argv, envp);
  int e = errno;
  dprintf(2, "paddock: %s: %s\n", argv[0], strerror(e));
  _exit(e == ENOENT ? 127 : 126);
}

/* Splits n NUL-terminated strings off p (len bytes); NULL when they are not all there. */
static char **strings(char **p, size_t *len, uint32_t n) {
  char **out = calloc((size_t)n + 1, sizeof(char *));
  if (!out) die("out of memory");
  for (uint32_t i = 0; i < n; i++) {
    char *end = memchr(*p, 0, *len);
    if (!end) {
      free(out);
      return NULL;
    }
    out[i] = *p;
    *len -= (size_t)(end - *p) + 1;
    *p = end + 1;
  }
  return out;
}

static void start(uint32_t id, char *p, size_t len) {
  if (len < 8 || find(id) || nexecs == MAX_EXECS) die("bad start");
  uint32_t argc = get_u32(p), envc = get_u32(p + 4);
  if (argc == 0 || argc > len || envc > len) die("bad start");
  p += 8;
  len -= 8;
  char **argv = strings(&p, &len, argc);
  char **envp = argv ? strings(&p, &len, envc) : NULL;
  char **cwd = envp ? strings(&p, &len, 1) : NULL;
  if (!cwd) die("bad start");
  int in[2], out[2], err[2];
  if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) die("pipe");
  pid_t pid = fork();
  if (pid < 0) {
    /* No process (the session's pid limit): reported as an exit the runner reads as a failed start. */
    close(in[0]), close(in[1]), close(out[0]), close(out[1]), close(err[0]), close(err[1]);
    send_u32('X', id, (uint32_t)(127 << 8));
    free(argv), free(envp), free(cwd);
    return;
  }
  if (pid == 0) exec_child(in[0], out[1], err[1], argv, envp, cwd[0]);
  /*
   * The group exists before any 'K' read after this start is handled: a kill(-pid)
   * sent before the child ran would otherwise find no group and be lost (the
   * classic job-control race; the child sets it as well). EACCES: it already exec'd,
   * having set it itself.
   */
  setpgid(pid, pid);
  free(argv), free(envp), free(cwd);
  close(in[0]), close(out[1]), close(err[1]);
  set_nonblock(in[1]), set_nonblock(out[0]), set_nonblock(err[0]);
  struct exec *e = &execs[nexecs++];
  memset(e, 0, sizeof *e);
  e->id = id;
  e->pid = pid;
  e->fd_in = in[1];
  e->fd_out = out[0];
  e->fd_err = err[0];
  send_u32('P', id, (uint32_t)pid);
}

/* Starts a nonblocking connect to the port on the loopback of family; the socket, or -1 (errno set). */
static int connect_loopback(int family, int port) {
  int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int r;
  if (family == AF_INET) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr = {htonl(INADDR_LOOPBACK)}};
    r = connect(fd, (struct sockaddr *)&a, sizeof a);
  } else {
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port), .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    r = connect(fd, (struct sockaddr *)&a, sizeof a);
  }
  if (r == 0 || errno == EINPROGRESS) return fd;
  int e = errno;
  close(fd);
  errno = e;
  return -1;
}

/* Points a tunnel at a connect to family's loopback; false (errno set) when it failed at once. */
static int tunnel_try(struct exec *e, int family) {
  int fd = connect_loopback(family, e->port);
  if (fd < 0) return 0;
  e->family = family;
  e->fd_out = fd;
  e->fd_in = dup(fd);
  e->connecting = 1;
  return e->fd_in >= 0;
}

static void tunnel_failed(struct exec *e, int err) {
  close_fd(&e->fd_out);
  close_fd(&e->fd_in);
  e->connecting = 0;
  e->exited = 1;
  e->status = (err & 0xff) << 8;
}

static void tunnel(uint32_t id, char *p, uint32_t len) {
  if (len != 4 || find(id) || nexecs == MAX_EXECS) die("bad tunnel");
  uint32_t port = get_u32(p);
  if (port == 0 || port > 65535) die("bad tunnel");
  struct exec *e = &execs[nexecs++];
  memset(e, 0, sizeof *e);
  e->id = id;
  e->tunnel = 1;
  e->port = (int)port;
  e->fd_err = -1;
  e->fd_out = e->fd_in = -1;
  if (!tunnel_try(e, AF_INET) && !tunnel_try(e, AF_INET6)) tunnel_failed(e, errno);
}

/* A tunnel's connect finished (its socket became writable): on to ::1 after a refusal on 127.0.0.1, or open. */
static void tunnel_connected(struct exec *e) {
  int err = 0;
  socklen_t n = sizeof err;
  if (getsockopt(e->fd_out, SOL_SOCKET, SO_ERROR, &err, &n) != 0) err = errno;
  if (err == 0) {
    e->connecting = 0;
    send_u32('P', e->id, 0);
    return;
  }
  close_fd(&e->fd_out);
  close_fd(&e->fd_in);
  if (e->family == AF_INET && tunnel_try(e, AF_INET6)) return;
  tunnel_failed(e, e->family == AF_INET ? errno : err);
}

static void on_frame(char type, uint32_t id, char *p, uint32_t len) {
  if (type == 'S') {
    start(id, p, len);
    return;
  }
  if (type == 'T') {
    tunnel(id, p, len);
    return;
  }
  struct exec *e = find(id);
  if (!e) return; /* ended meanwhile: what was sent for it has no one to go to */
  if (type == 'I') {
    if (len == 0) e->close_in = 1;
    else if (e->fd_in >= 0) {
      reserve(&e->in, len);
      memcpy(e->in.data + e->in.len, p, len);
      e->in.len += len;
    }
  } else if (type == 'K' && len == 4 && e->tunnel) {
    /* A tunnel has no process: any signal aborts it (never kill(-0), which is this process's own group). */
    close_fd(&e->fd_out);
    close_fd(&e->fd_in);
    e->connecting = 0;
    e->exited = 1;
  } else if (type == 'K' && len == 4) {
    int sig = (int)get_u32(p);
    if (sig > 0 && sig < 65 && !e->exited && e->pid > 0) kill(-e->pid, sig);
  } else if (type == 'Z' && len == 1) {
    e->paused = p[0] != 0;
  } else {
    die("bad frame");
  }
}

static void read_control(void) {
  reserve(&from_runner, READ_CHUNK);
  ssize_t n = read(0, from_runner.data + from_runner.len, from_runner.cap - from_runner.len);
  if (n == 0) {
    control_open = 0;
    return;
  }
  if (n < 0) {
    if (errno == EAGAIN || errno == EINTR) return;
    control_open = 0;
    return;
  }
  from_runner.len += (size_t)n;
  while (from_runner.len - from_runner.off >= HEADER) {
    char *h = from_runner.data + from_runner.off;
    uint32_t id = get_u32(h + 1), len = get_u32(h + 5);
    if (len > MAX_FRAME) die("frame too large");
    if (from_runner.len - from_runner.off < HEADER + len) {
      reserve(&from_runner, HEADER + len);
      break;
    }
    from_runner.off += HEADER + len;
    on_frame(h[0], id, h + HEADER, len);
  }
}

static void write_control(void) {
  while (to_runner.off < to_runner.len) {
    ssize_t n = write(1, to_runner.data + to_runner.off, to_runner.len - to_runner.off);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) return;
      control_open = 0;
      to_runner.off = to_runner.len;
      return;
    }
    to_runner.off += (size_t)n;
  }
}

/* Reads one chunk of a command's output; at most `*left` bytes once it exited. */
static void read_output(struct exec *e, int *fd, char type, int *left) {
  static char chunk[READ_CHUNK];
  size_t want = e->exited && *left < READ_CHUNK ? (size_t)*left : READ_CHUNK;
  if (want == 0) {
    close_fd(fd);
    return;
  }
  ssize_t n = read(*fd, chunk, want);
  if (n > 0) {
    send_frame(type, e->id, chunk, (uint32_t)n);
    if (e->exited) *left -= (int)n;
  } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
    close_fd(fd);
    /* A tunnel's peer is done sending (or the connection broke): the runner's end reads its end. */
    if (e->tunnel) send_frame('D', e->id, NULL, 0);
  } else if (e->exited) {
    close_fd(fd);
  }
}

/* Closes what the runner writes into: a tunnel's write side is shut down first (a dup'ed socket's close alone sends no FIN). */
static void end_input(struct exec *e) {
  if (e->fd_in >= 0 && e->tunnel) shutdown(e->fd_in, SHUT_WR);
  close_fd(&e->fd_in);
}

static void write_input(struct exec *e) {
  size_t pending = e->in.len - e->in.off;
  if (pending > 0) {
    ssize_t n = write(e->fd_in, e->in.data + e->in.off, pending);
    if (n > 0) {
      e->in.off += (size_t)n;
      send_u32('W', e->id, (uint32_t)n);
    } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
      close_fd(&e->fd_in); /* the command closed its stdin: nothing more will be taken */
      send_frame('C', e->id, NULL, 0);
    }
  }
  if (e->fd_in >= 0 && e->close_in && e->in.off == e->in.len) end_input(e);
}

static int pending_bytes(int fd) {
  int n = 0;
  if (fd < 0 || ioctl(fd, FIONREAD, &n) != 0) return 0;
  return n;
}

static void reap(void) {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    for (int i = 0; i < nexecs; i++) {
      struct exec *e = &execs[i];
      if (e->pid != pid || e->exited) continue;
      e->exited = 1;
      e->status = status;
      e->left_out = pending_bytes(e->fd_out);
      e->left_err = pending_bytes(e->fd_err);
      close_fd(&e->fd_in);
    }
  }
}

/* Reports the exits whose output was all read, and forgets them. */
static void finish(void) {
  for (int i = 0; i < nexecs;) {
    struct exec *e = &execs[i];
    if (e->exited && e->fd_out < 0 && e->fd_err < 0) {
      send_u32('X', e->id, (uint32_t)e->status);
      free(e->in.data);
      execs[i] = execs[--nexecs];
    } else {
      i++;
    }
  }
}

int main(void) {
  /* Outside a namespace of its own its exits would kill nothing and its reaping would be someone else's job. */
  if (getpid() != 1) {
    dprintf(2, "paddock-init: must run as pid 1 of a pid namespace (bwrap --as-pid-1)\n");
    return 2;
  }
  prctl(PR_SET_DUMPABLE, 0);
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, NULL);
  int sfd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
  if (sfd < 0) die("signalfd");
  signal(SIGPIPE, SIG_IGN);
  set_nonblock(0);
  set_nonblock(1);
  static struct pollfd fds[3 + 3 * MAX_EXECS];
  static struct exec *owner[3 + 3 * MAX_EXECS];
  static int kind[3 + 3 * MAX_EXECS];
  while (control_open) {
    int reading = to_runner.len - to_runner.off < OUT_HIGH;
    int n = 0;
    fds[n++] = (struct pollfd){.fd = 0, .events = POLLIN};
    fds[n++] = (struct pollfd){.fd = sfd, .events = POLLIN};
    fds[n++] = (struct pollfd){.fd = 1, .events = to_runner.len > to_runner.off ? POLLOUT : 0};
    for (int i = 0; i < nexecs; i++) {
      struct exec *e = &execs[i];
      int may_read = reading && !e->paused;
      if (e->connecting) {
        fds[n] = (struct pollfd){.fd = e->fd_in, .events = POLLOUT}, owner[n] = e, kind[n++] = 4;
        continue;
      }
      if (e->fd_out >= 0 && may_read) fds[n] = (struct pollfd){.fd = e->fd_out, .events = POLLIN}, owner[n] = e, kind[n++] = 1;
      if (e->fd_err >= 0 && may_read) fds[n] = (struct pollfd){.fd = e->fd_err, .events = POLLIN}, owner[n] = e, kind[n++] = 2;
      if (e->fd_in >= 0 && e->in.len > e->in.off) fds[n] = (struct pollfd){.fd = e->fd_in, .events = POLLOUT}, owner[n] = e, kind[n++] = 3;
    }
    if (poll(fds, (nfds_t)n, -1) < 0) {
      if (errno == EINTR) continue;
      die("poll");
    }
    if (fds[1].revents & POLLIN) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) == sizeof si) {
      }
    }
    reap();
    if (fds[0].revents) read_control();
    if (fds[2].revents & (POLLERR | POLLHUP)) control_open = 0;
    for (int i = 3; i < n; i++) {
      if (!fds[i].revents) continue;
      struct exec *e = owner[i];
      if (kind[i] == 1) read_output(e, &e->fd_out, 'O', &e->left_out);
      else if (kind[i] == 2) read_output(e, &e->fd_err, 'E', &e->left_err);
      else if (kind[i] == 4) tunnel_connected(e);
      else write_input(e);
    }
    for (int i = 0; i < nexecs; i++) {
      struct exec *e = &execs[i];
      /* An exited command whose pipes held nothing more is done with them, polled or not. */
      if (e->exited && e->left_out == 0) close_fd(&e->fd_out);
      if (e->exited && e->left_err == 0) close_fd(&e->fd_err);
      if (e->fd_in >= 0 && e->close_in && e->in.off == e->in.len) end_input(e);
      /* A tunnel is done once both directions are. */
      if (e->tunnel && !e->connecting && e->fd_out < 0 && e->fd_in < 0) e->exited = 1;
    }
    finish();
    write_control();
  }
  kill_namespace();
  return 0;
}
