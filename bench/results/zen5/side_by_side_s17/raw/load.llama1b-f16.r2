 18:36:10 up  1:00,  0 user,  load average: 1.99, 1.94, 1.78
