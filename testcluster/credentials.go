package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// identity is one bearer-token user of the apiserver; each gets
// DIR/<name>.kubeconfig.
type identity struct {
	name   string
	user   string
	groups []string
}

var identities = []identity{
	{name: "admin", user: "admin", groups: []string{"system:masters"}},
	{name: "controller", user: "system:serviceaccount:egress-address-system:egress-address-controller",
		groups: []string{"system:serviceaccounts", "system:serviceaccounts:egress-address-system"}},
	// Read-only: bound to view (see bindOperator) once the apiserver is ready.
	{name: "operator", user: "operator"},
}

// credentials are the files the apiserver is started with (all in the
// temporary directory) and what the program itself needs to talk to it.
type credentials struct {
	caPEM       []byte
	servingCert string
	servingKey  string
	saKey       string
	tokens      string
	adminToken  string
}

// writeCredentials makes a CA, a serving certificate for 127.0.0.1 and
// localhost, a service-account signing key and one token per identity. The
// apiserver's files go into tmp; ca.crt and the kubeconfigs go into dir.
func writeCredentials(dir, tmp, server string) (*credentials, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTemplate := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "testcluster-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}

	servingKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	servingTemplate := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:     []string{"localhost"},
	}
	servingDER, err := x509.CreateCertificate(rand.Reader, servingTemplate, caCert, &servingKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	servingKeyDER, err := x509.MarshalECPrivateKey(servingKey)
	if err != nil {
		return nil, err
	}

	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}

	c := &credentials{
		caPEM:       pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		servingCert: filepath.Join(tmp, "serving.crt"),
		servingKey:  filepath.Join(tmp, "serving.key"),
		saKey:       filepath.Join(tmp, "service-account.key"),
		tokens:      filepath.Join(tmp, "tokens.csv"),
	}

	var tokens bytes.Buffer
	w := csv.NewWriter(&tokens)
	kubeconfigs := map[string][]byte{}
	for _, id := range identities {
		token, err := randomToken()
		if err != nil {
			return nil, err
		}
		if id.name == "admin" {
			c.adminToken = token
		}
		record := []string{token, id.user, "testcluster-" + id.name}
		if len(id.groups) > 0 {
			record = append(record, strings.Join(id.groups, ","))
		}
		if err := w.Write(record); err != nil {
			return nil, err
		}
		kubeconfigs[filepath.Join(dir, id.name+".kubeconfig")] = kubeconfig(server, c.caPEM, id.name, token)
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return nil, err
	}

	files := map[string][]byte{
		c.servingCert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: servingDER}),
		c.servingKey:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: servingKeyDER}),
		c.saKey:       pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(saKey)}),
		c.tokens:      tokens.Bytes(),
	}
	for path, data := range kubeconfigs {
		files[path] = data
	}
	for path, data := range files {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), c.caPEM, 0o644); err != nil {
		return nil, err
	}
	return c, nil
}

func randomToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

func kubeconfig(server string, caPEM []byte, user, token string) []byte {
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: testcluster
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: testcluster
  context:
    cluster: testcluster
    user: %s
current-context: testcluster
`, server, base64.StdEncoding.EncodeToString(caPEM), user, token, user)
}

// apiClient talks HTTPS to the apiserver as the admin identity.
type apiClient struct {
	client *http.Client
	server string
	token  string
}

var errAPIServerExited = errors.New("apiserver exited before it was ready")

func newAPIClient(caPEM []byte, server, token string) *apiClient {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &apiClient{
		client: &http.Client{
			Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
			Timeout:   10 * time.Second,
		},
		server: server,
		token:  token,
	}
}

func (c *apiClient) do(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.server+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// waitReady polls /readyz until it answers 200, the apiserver exits, the
// context ends, or the timeout passes.
func (c *apiClient) waitReady(ctx context.Context, apiDone <-chan error, timeout time.Duration) error {
	deadline := time.After(timeout)
	last := "no answer"
	for {
		code, body, err := c.do(ctx, http.MethodGet, "/readyz", nil)
		switch {
		case err != nil:
			last = err.Error()
		case code == http.StatusOK:
			return nil
		default:
			last = fmt.Sprintf("%d %s", code, body)
		}
		select {
		case err := <-apiDone:
			return fmt.Errorf("%w: %v", errAPIServerExited, err)
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("apiserver not ready after %s; last /readyz answer: %s", timeout, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// bindOperator lets the operator identity read what the view ClusterRole
// allows. Without kube-controller-manager nothing aggregates the bootstrap
// view role (its rules stay empty), so the operator is also bound to
// system:aggregate-to-view, the bootstrap role that holds view's rules.
func (c *apiClient) bindOperator(ctx context.Context) error {
	for _, role := range []string{"view", "system:aggregate-to-view"} {
		binding := rbacv1.ClusterRoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: "testcluster:operator:" + strings.TrimPrefix(role, "system:")},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "operator"}},
		}
		body, err := json.Marshal(binding)
		if err != nil {
			return err
		}
		code, answer, err := c.do(ctx, http.MethodPost, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", body)
		if err != nil {
			return fmt.Errorf("binding operator to %s: %w", role, err)
		}
		if code != http.StatusCreated {
			return fmt.Errorf("binding operator to %s: %d %s", role, code, answer)
		}
	}
	return nil
}
