/* A pod sandbox's pause process, for the CRI tests: it holds the pod's
 * namespaces and waits. SIGTERM or SIGINT (StopPodSandbox) ends it with
 * status 0. Built with -static: the sandbox image holds nothing else. */
#include <signal.h>
#include <unistd.h>

static void stop(int sig)
{
	(void)sig;
	_exit(0);
}

int main(void)
{
	signal(SIGTERM, stop);
	signal(SIGINT, stop);
	for (;;)
		pause();
}
