// Command testcluster runs a real Kubernetes control plane for the project's
// tests: etcd and kube-apiserver, both inside this one process.
//
//	testcluster --dir DIR [--port N] [--exit-on-stdin-close] [--ready-timeout D] [--v N]
//	            [--apiserver-arg=--FLAG=VALUE ...]
//
// It writes admin.kubeconfig, controller.kubeconfig, operator.kubeconfig,
// ca.crt and etcd.url (etcd's client URL, plain HTTP on loopback, for tests
// that compact its history) into DIR, waits until /readyz answers 200, and then prints exactly one
// line to stdout, "ready https://127.0.0.1:PORT". Logs go to stderr. SIGTERM or
// SIGINT (or the end of stdin, with --exit-on-stdin-close) stops the apiserver
// and etcd and removes everything the program made outside DIR; a second
// signal exits at once.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

var logger = log.New(os.Stderr, "testcluster: ", log.LstdFlags|log.Lmicroseconds)

func main() {
	os.Exit(run())
}

// harness is one run: etcd, the apiserver, and what to clean up.
type harness struct {
	dir          string
	tmp          string
	port         int
	readyTimeout time.Duration
	verbosity    int
	// extraArgs go to the apiserver after the harness's own, so they
	// override them (a test that needs watches served from etcd, say).
	extraArgs []string
	stdout    *os.File

	stopOnce sync.Once
	stop     chan struct{} // closed on the first SIGTERM/SIGINT or end of stdin
}

func run() int {
	// Only the ready line goes to the real stdout; anything a library prints
	// lands on stderr with the logs.
	h := &harness{stdout: os.Stdout, stop: make(chan struct{})}
	os.Stdout = os.Stderr

	fs := flag.NewFlagSet("testcluster", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	fs.StringVar(&h.dir, "dir", "", "directory for the kubeconfigs and ca.crt (created if needed; required)")
	fs.IntVar(&h.port, "port", 0, "apiserver secure port on 127.0.0.1 (0: pick a free one)")
	stdinExit := fs.Bool("exit-on-stdin-close", false, "shut down when stdin reaches end of file")
	fs.DurationVar(&h.readyTimeout, "ready-timeout", 120*time.Second, "how long to wait for /readyz")
	fs.IntVar(&h.verbosity, "v", 0, "apiserver log verbosity (klog, to stderr)")
	fs.Func("apiserver-arg", "one more kube-apiserver flag, as --FLAG=VALUE (repeatable)", func(arg string) error {
		if !strings.HasPrefix(arg, "--") || !strings.Contains(arg, "=") {
			return fmt.Errorf("%q is not of the form --FLAG=VALUE", arg)
		}
		h.extraArgs = append(h.extraArgs, arg)
		return nil
	})
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	if h.dir == "" || fs.NArg() != 0 {
		logger.Print("usage: testcluster --dir DIR [--port N] [--exit-on-stdin-close] [--ready-timeout D] [--v N] [--apiserver-arg=--FLAG=VALUE ...]")
		return 2
	}

	// From here on, SIGTERM and SIGINT wait in this channel rather than end
	// the process.
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)

	sweepStale()
	var err error
	h.tmp, err = os.MkdirTemp("", tmpPrefix)
	if err != nil {
		logger.Print(err)
		return 1
	}
	defer h.removeTmp()
	if err := os.WriteFile(filepath.Join(h.tmp, "pid"), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		logger.Print(err)
		return 1
	}
	// A fatal log in the apiserver ends the process through klog: remove
	// the temporary data first there too.
	klog.OsExit = func(code int) {
		h.removeTmp()
		os.Exit(code)
	}

	// Building the command installs the apiserver's own SIGTERM/SIGINT
	// handler, which ends its context on the first signal. A signal while
	// its post-start hooks still run makes it exit fatally, so this program
	// takes the signals back (Reset drops every channel, Notify adds ours
	// again) and passes the first one on (RequestShutdown) only once the
	// apiserver is ready. A second signal exits at once.
	cmd := app.NewAPIServerCommand()
	cmd.SetOut(os.Stderr)
	cmd.SetErr(os.Stderr)
	signal.Reset(syscall.SIGTERM, syscall.SIGINT)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		h.requestStop((<-signals).String())
		sig := <-signals
		logger.Printf("second %s: exiting now", sig)
		h.removeTmp()
		os.Exit(1)
	}()
	if *stdinExit {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			h.requestStop("stdin closed")
		}()
	}

	err = h.serve(cmd)
	klog.Flush()
	if err != nil {
		logger.Print(err)
		return 1
	}
	logger.Print("stopped")
	return 0
}

func (h *harness) requestStop(why string) {
	h.stopOnce.Do(func() {
		logger.Printf("%s: shutting down", why)
		close(h.stop)
	})
}

func (h *harness) stopped() bool {
	select {
	case <-h.stop:
		return true
	default:
		return false
	}
}

func (h *harness) removeTmp() {
	if err := os.RemoveAll(h.tmp); err != nil {
		logger.Print(err)
	}
}

// serve runs etcd and the apiserver until a stop is requested. It returns
// nil for a run that ends that way.
func (h *harness) serve(cmd interface {
	SetArgs([]string)
	Execute() error
}) error {
	if err := os.MkdirAll(h.dir, 0o755); err != nil {
		return err
	}
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	port := h.port
	if port == 0 {
		port = ports[2]
	}
	server := "https://127.0.0.1:" + strconv.Itoa(port)

	files, err := writeCredentials(h.dir, h.tmp, server)
	if err != nil {
		return err
	}

	etcd, err := startEtcd(h.stop, filepath.Join(h.tmp, "etcd"), ports[0], ports[1])
	if err != nil {
		return err
	}
	defer func() {
		etcd.Close()
		logger.Print("etcd stopped")
	}()
	if h.stopped() {
		return nil
	}

	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	if err := os.WriteFile(filepath.Join(h.dir, "etcd.url"), []byte(etcdURL+"\n"), 0o600); err != nil {
		return err
	}
	cmd.SetArgs(append([]string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--endpoint-reconciler-type=none",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(h.tmp, "certs"),
		"--tls-cert-file=" + files.servingCert,
		"--tls-private-key-file=" + files.servingKey,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--allow-privileged=true",
		"--authorization-mode=RBAC",
		"--disable-admission-plugins=ServiceAccount",
		"--token-auth-file=" + files.tokens,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + files.saKey,
		"--service-account-signing-key-file=" + files.saKey,
		"--v=" + strconv.Itoa(h.verbosity),
	}, h.extraArgs...))
	apiDone := make(chan error, 1)
	started := time.Now()
	go func() { apiDone <- cmd.Execute() }()

	ctx := context.Background()
	api := newAPIClient(files.caPEM, server, files.adminToken)
	err = api.waitReady(ctx, apiDone, h.readyTimeout)
	if errors.Is(err, errAPIServerExited) {
		return err
	}
	if err == nil {
		logger.Printf("apiserver ready after %s", time.Since(started).Round(time.Millisecond))
		err = api.bindOperator(ctx)
	}
	if err == nil && !h.stopped() {
		if _, err = fmt.Fprintf(h.stdout, "ready %s\n", server); err == nil {
			_ = h.stdout.Sync()
		}
	}
	if err != nil {
		h.requestStop("not ready")
	}

	select {
	case <-h.stop:
		genericapiserver.RequestShutdown()
		if apiErr := <-apiDone; apiErr != nil && err == nil {
			err = apiErr
		}
		logger.Print("apiserver stopped")
		return err
	case apiErr := <-apiDone:
		return fmt.Errorf("apiserver exited: %v", apiErr)
	}
}

const tmpPrefix = "testcluster-"

// sweepStale removes the temporary directories of earlier runs that were
// killed (SIGKILL) before they could clean up: each names its run's pid. A
// directory without that file is left alone (it may be a run starting up).
func sweepStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tmpPrefix+"*"))
	for _, dir := range dirs {
		data, err := os.ReadFile(filepath.Join(dir, "pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(string(data))
		if err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			continue // still running (or not ours to judge)
		}
		if err := os.RemoveAll(dir); err == nil {
			logger.Printf("removed %s, left by killed run %d", dir, pid)
		}
	}
}

// startEtcd starts an etcd member on loopback ports, storing its data in
// dataDir without fsync, and waits until it serves.
func startEtcd(stop <-chan struct{}, dataDir string, clientPort, peerPort int) (*embed.Etcd, error) {
	client := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(clientPort))}
	peer := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(peerPort))}
	cfg := embed.NewConfig()
	cfg.Name = "testcluster"
	cfg.Dir = dataDir
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.UnsafeNoFsync = true
	cfg.LogLevel = "warn"
	etcd, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	select {
	case <-etcd.Server.ReadyNotify():
		logger.Printf("etcd ready on %s", client.String())
		return etcd, nil
	case err := <-etcd.Err():
		etcd.Close()
		return nil, fmt.Errorf("etcd: %w", err)
	case <-time.After(60 * time.Second):
		etcd.Close()
		return nil, errors.New("etcd: not ready after 60s")
	case <-stop:
		return etcd, nil
	}
}

// freePorts returns n distinct loopback TCP ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer func() { _ = l.Close() }()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
