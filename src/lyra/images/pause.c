/* The pod sandbox's process (registry.k8s.io/pause): holds the pod's namespaces, reaps orphans, exits on
 * SIGINT or SIGTERM. Built by `lyra image build` with `gcc -static`, so the image is this one file. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int signo) {
  (void)signo;
  _exit(0);
}

static void on_child(int signo) {
  (void)signo;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction stop = {.sa_handler = on_stop};
  struct sigaction child = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP};
  if (sigaction(SIGINT, &stop, NULL) < 0 || sigaction(SIGTERM, &stop, NULL) < 0 ||
      sigaction(SIGCHLD, &child, NULL) < 0) {
    perror("pause: sigaction");
    return 1;
  }
  if (getpid() != 1) {
    fprintf(stderr, "pause: warning: not pid 1\n");
  }
  for (;;) {
    pause();
  }
}
