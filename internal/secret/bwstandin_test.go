package secret

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// bwStandIn is a local stand-in for the server API of Bitwarden (and
// Vaultwarden) as far as bw login, unlock, sync and get use it: the
// password prelogin, the token endpoint (password and refresh grants),
// the account sync with one login item, the server config. Keys and
// items are made as the clients expect them: the master key is
// PBKDF2-SHA256 of the password salted with the email, its hash for the
// server one more PBKDF2 round salted with the password, the user key 64
// random bytes (AES-256-CBC and HMAC-SHA256 halves) wrapped by the master
// key stretched with HKDF, every string an encrypted string of type 2
// ("2.iv|data|mac"). Written from the wire format the real bw sends and
// accepts; it checks the master password hash and nothing else.
type bwStandIn struct {
	srv   *httptest.Server
	email string
	mu    sync.Mutex
	calls []string
}

const standInIterations = 5000

func newBWStandIn(t *testing.T, email, password string, items map[string]map[string]string) *bwStandIn {
	t.Helper()
	b64 := base64.StdEncoding
	masterKey, err := pbkdf2.Key(sha256.New, password, []byte(email), standInIterations, 32)
	if err != nil {
		t.Fatal(err)
	}
	hash, _ := pbkdf2.Key(sha256.New, string(masterKey), []byte(password), 1, 32)
	stretchEnc, _ := hkdf.Expand(sha256.New, masterKey, "enc", 32)
	stretchMac, _ := hkdf.Expand(sha256.New, masterKey, "mac", 32)
	userKey := make([]byte, 64)
	rand.Read(userKey)
	enc := func(encKey, macKey, plain []byte) string {
		iv := make([]byte, 16)
		rand.Read(iv)
		pad := 16 - len(plain)%16
		p := append([]byte(nil), plain...)
		for range pad {
			p = append(p, byte(pad))
		}
		blk, _ := aes.NewCipher(encKey)
		ct := make([]byte, len(p))
		cipher.NewCBCEncrypter(blk, iv).CryptBlocks(ct, p)
		m := hmac.New(sha256.New, macKey)
		m.Write(iv)
		m.Write(ct)
		return "2." + b64.EncodeToString(iv) + "|" + b64.EncodeToString(ct) + "|" + b64.EncodeToString(m.Sum(nil))
	}
	withUserKey := func(s string) string { return enc(userKey[:32], userKey[32:], []byte(s)) }
	protectedKey := enc(stretchEnc, stretchMac, userKey)
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, _ := x509.MarshalPKCS8PrivateKey(rk)
	pub, _ := x509.MarshalPKIXPublicKey(&rk.PublicKey)
	privEnc := enc(userKey[:32], userKey[32:], pkcs8)
	const userID = "11111111-2222-3333-4444-555555555555"
	accountKeys := map[string]any{"publicKeyEncryptionKeyPair": map[string]any{"publicKey": b64.EncodeToString(pub), "wrappedPrivateKey": privEnc}}
	token := func() map[string]any {
		now := time.Now().Unix()
		claims, _ := json.Marshal(map[string]any{"nbf": now, "exp": now + 3600, "iss": "stand-in", "sub": userID, "email": email,
			"email_verified": true, "name": "Me", "premium": false, "sstamp": "s", "device": "d", "scope": []string{"api", "offline_access"}, "amr": []string{"Application"}})
		jwt := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"RS256","typ":"JWT"}`)) + "." + base64.RawURLEncoding.EncodeToString(claims) + ".c2ln"
		return map[string]any{"access_token": jwt, "expires_in": 3600, "token_type": "Bearer", "refresh_token": "refresh", "scope": "api offline_access"}
	}
	var ciphers []any
	n := 0
	for name, fields := range items {
		n++
		var custom []any
		for k, v := range fields {
			if k != "password" && k != "username" {
				custom = append(custom, map[string]any{"type": 0, "name": withUserKey(k), "value": withUserKey(v), "linkedId": nil})
			}
		}
		ciphers = append(ciphers, map[string]any{"object": "cipherDetails", "id": "aaaaaaaa-bbbb-cccc-dddd-00000000000" + string(rune('0'+n)),
			"organizationId": nil, "folderId": nil, "type": 1, "name": withUserKey(name), "notes": nil, "favorite": false, "edit": true,
			"viewPassword": true, "reprompt": 0, "organizationUseTotp": false, "revisionDate": "2026-01-01T00:00:00Z",
			"creationDate": "2026-01-01T00:00:00Z", "deletedDate": nil, "collectionIds": []any{},
			"login":  map[string]any{"username": withUserKey(fields["username"]), "password": withUserKey(fields["password"]), "uris": []any{}, "totp": nil},
			"fields": custom, "attachments": nil, "passwordHistory": nil})
	}
	s := &bwStandIn{email: email}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.calls = append(s.calls, r.Method+" "+r.URL.Path)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		var out any
		switch r.URL.Path {
		case "/api/config":
			out = map[string]any{"object": "config", "version": "2026.9.0", "gitHash": "standin", "server": nil, "environment": map[string]any{}, "featureStates": map[string]any{}}
		case "/identity/accounts/prelogin/password":
			out = map[string]any{"KdfSettings": map[string]any{"KdfType": 0, "Iterations": standInIterations}, "Salt": email}
		case "/identity/connect/token":
			form, _ := url.ParseQuery(string(body))
			switch {
			case form.Get("grant_type") == "refresh_token" && form.Get("refresh_token") == "refresh":
				out = token()
			case form.Get("grant_type") == "password" && strings.EqualFold(form.Get("username"), email) && form.Get("password") == b64.EncodeToString(hash):
				tok := token()
				tok["Key"], tok["PrivateKey"], tok["AccountKeys"] = protectedKey, privEnc, accountKeys
				tok["Kdf"], tok["KdfIterations"], tok["ResetMasterPassword"], tok["ForcePasswordReset"] = 0, standInIterations, false, false
				tok["UserDecryptionOptions"] = map[string]any{"Object": "userDecryptionOptions", "HasMasterPassword": true,
					"MasterPasswordUnlock": map[string]any{"Kdf": map[string]any{"KdfType": 0, "Iterations": standInIterations}, "MasterKeyEncryptedUserKey": protectedKey, "Salt": email}}
				out = tok
			default:
				w.WriteHeader(http.StatusBadRequest)
				out = map[string]any{"error": "invalid_grant", "error_description": "invalid_username_or_password",
					"ErrorModel": map[string]any{"Message": "Username or password is incorrect. Try again.", "Object": "error"}}
			}
		case "/api/sync":
			out = map[string]any{"object": "sync",
				"profile": map[string]any{"object": "profile", "id": userID, "name": "Me", "email": email, "emailVerified": true, "premium": false,
					"premiumFromOrganization": false, "culture": "en-US", "twoFactorEnabled": false, "key": protectedKey, "privateKey": privEnc,
					"accountKeys": accountKeys, "securityStamp": "s", "forcePasswordReset": false, "usesKeyConnector": false,
					"organizations": []any{}, "providers": []any{}, "providerOrganizations": []any{}, "creationDate": "2026-01-01T00:00:00Z"},
				"folders": []any{}, "collections": []any{}, "policies": []any{}, "sends": []any{}, "ciphers": ciphers,
				"domains": map[string]any{"object": "domains", "equivalentDomains": []any{}, "globalEquivalentDomains": []any{}}}
		case "/api/accounts/revision-date":
			out = time.Now().UnixMilli()
		case "/api/accounts/key-management/user-key-id":
			w.WriteHeader(http.StatusOK)
			return
		default:
			w.WriteHeader(http.StatusNotFound)
			return
		}
		_ = json.NewEncoder(w).Encode(out)
	}))
	s.srv.StartTLS()
	t.Cleanup(s.srv.Close)
	return s
}

// caPEM is the stand-in's certificate, for NODE_EXTRA_CA_CERTS (bw talks
// HTTPS only).
func (s *bwStandIn) caPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw})
}
